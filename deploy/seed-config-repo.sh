#!/bin/sh
# Seeds the demo's git config store (run once by the `config-repo-init` compose service).
#
#   SEED_DIR      the template to copy            (default /seed, = ./config-repo mounted read-only)
#   BARE_REPO     the bare "remote" to create     (default /srv/git/config.git, a shared volume)
#   CHECKOUT_DIR  a working checkout of main      (default /srv/grl-config, the controller's --config;
#                 empty: none, for controllers that follow BARE_REPO with --config-git)
#
# Idempotent: an existing bare repo or checkout is left untouched, so restarting the stack keeps
# the history that rlc has committed since.
set -eu

seed=${SEED_DIR:-/seed}
bare=${BARE_REPO:-/srv/git/config.git}
checkout=${CHECKOUT_DIR-/srv/grl-config}

if [ -f "$bare/HEAD" ]; then
    echo "config repo $bare already exists; not seeding"
else
    [ -f "$seed/README.md" ] || { echo "seed template $seed is missing" >&2; exit 1; }
    git init --quiet --bare --initial-branch=main "$bare"
    work=$(mktemp -d)
    git -C "$work" init --quiet --initial-branch=main
    cp -R "$seed"/. "$work"/
    git -C "$work" add -A
    git -C "$work" -c user.name="GRL demo" -c user.email="grl-demo@example.invalid" \
        commit --quiet -m "Seed the config repo from the config-repo/ template"
    git -C "$work" push --quiet "$bare" main
    rm -rf "$work"
    echo "seeded $bare from $seed"
fi

if [ -z "$checkout" ]; then
    echo "no checkout asked for"
elif [ -d "$checkout/.git" ]; then
    echo "checkout $checkout already exists"
else
    # The directory may exist (a volume mount point) but must be empty for `git clone`.
    git clone --quiet --branch main "$bare" "$checkout"
    echo "checked out main of $bare into $checkout"
fi
