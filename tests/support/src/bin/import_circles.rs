//! Prints the import circles of the crates whose root files are given (relative to the
//! current directory), then `import circles: N`, their total. See
//! `test_support::import_circles`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let roots: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if roots.is_empty() {
        eprintln!("usage: import_circles <crate root file>... (e.g. grl/server/src/lib.rs)");
        std::process::exit(2);
    }
    let (text, total) = test_support::import_circles::report(std::path::Path::new("."), &roots)?;
    print!("{text}");
    println!("import circles: {total}");
    Ok(())
}
