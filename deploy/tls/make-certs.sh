#!/bin/sh
# Makes a private CA and one certificate per GRL process, plus the admin bearer token, with
# the openssl CLI. Used by docker-compose.yml (the `certs-init` job) and for Kubernetes
# Secrets (deploy/kubernetes/README.md); run by hand as
#
#   sh deploy/tls/make-certs.sh OUT_DIR NAME[:SAN,SAN...] ...
#
# e.g. `sh deploy/tls/make-certs.sh ./certs controller aggregator-a aggregator-b admin`.
# For each NAME it writes OUT_DIR/NAME.crt and OUT_DIR/NAME.key: CN=NAME, SAN DNS:NAME (plus
# the extra SANs, DNS names or IP addresses), usable both as server and as client
# certificate (a tier serves with it and presents it to its parent). It also writes
# OUT_DIR/ca.crt (trust this everywhere: --tls-ca, --tls-client-ca), OUT_DIR/ca.key (keep it
# off the servers) and OUT_DIR/admin-token (for --admin-token-file and --token-file).
# Files that exist are kept, so a second run only adds missing names. To rotate a
# certificate, delete its .crt/.key and run again: servers pick the new files up at the
# next handshake, clients at their next connection.
set -eu

out=${1:?usage: make-certs.sh OUT_DIR NAME[:SAN,...] ...}
shift
mkdir -p "$out"
umask 077
days=${CERT_DAYS:-365}

if [ ! -s "$out/ca.crt" ] || [ ! -s "$out/ca.key" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$out/ca.key" -out "$out/ca.crt" -days "$days" -subj "/CN=grl-demo-ca" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    echo "made $out/ca.crt" >&2
fi

if [ ! -s "$out/admin-token" ]; then
    openssl rand -hex 32 >"$out/admin-token"
    echo "made $out/admin-token" >&2
fi

for spec in "$@"; do
    name=${spec%%:*}
    extra=""
    [ "$spec" != "$name" ] && extra=${spec#*:}
    [ -s "$out/$name.crt" ] && [ -s "$out/$name.key" ] && continue
    san="DNS:$name"
    oldifs=$IFS
    IFS=,
    for s in $extra; do
        case $s in
        *[!0-9.]*) san="$san,DNS:$s" ;;
        *) san="$san,IP:$s" ;;
        esac
    done
    IFS=$oldifs
    ext=$(mktemp)
    printf '%s\n' "subjectAltName=$san" "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth,clientAuth" >"$ext"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$out/$name.key.new" -out "$out/$name.csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
        -CAcreateserial -out "$out/$name.crt.new" -days "$days" -extfile "$ext" 2>/dev/null
    rm -f "$ext" "$out/$name.csr"
    # Key first, then certificate, each in one rename: a server reloading in between keeps
    # its previous pair until both match.
    mv "$out/$name.key.new" "$out/$name.key"
    mv "$out/$name.crt.new" "$out/$name.crt"
    echo "made $out/$name.crt ($san)" >&2
done
# Containers running as another user read the keys through a group-readable volume.
chmod 0644 "$out"/*.crt
chmod 0640 "$out"/*.key "$out/admin-token"
