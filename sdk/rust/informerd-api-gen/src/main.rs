//! Generates the `informerd.v1` messages and tonic clients of `informerd-api` from the
//! repository's `proto/` into `informerd-api/src/generated/`, which is checked in: the published
//! crate then builds without `protoc` or the repository (as the Python SDK's stubs are checked
//! in). `--check` generates into a temporary directory and fails if the checked-in file differs.
//!
//! ```sh
//! cargo run -p informerd-api-gen            # after changing proto/
//! cargo run -p informerd-api-gen -- --check # make test-rust
//! ```
//!
//! `protoc` comes from `PROTOC` or PATH (Debian's protobuf-compiler, which `tools/bootstrap`
//! installs).
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const FILE: &str = "informerd.v1.rs";

fn generate(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = here.join("../../../proto").canonicalize()?;
    let protos: Vec<PathBuf> = ["admin", "errors", "informers", "objects", "queues", "work"]
        .iter()
        .map(|name| root.join(format!("informerd/v1/{name}.proto")))
        .collect();
    tonic_prost_build::configure()
        .build_server(false)
        // Clients over any tower service: no `connect` helper, so no transport feature needed.
        .build_transport(false)
        .out_dir(out)
        // Object JSON is handed around without copies (`bytes::Bytes` is reference-counted).
        .bytes(".informerd.v1.Object.json")
        .compile_protos(&protos, &[root])?;
    Ok(())
}

fn run(check: bool) -> Result<bool, Box<dyn std::error::Error>> {
    let dest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../informerd-api/src/generated");
    if !check {
        std::fs::create_dir_all(&dest)?;
        generate(&dest)?;
        println!("informerd-api-gen: wrote {}", dest.join(FILE).display());
        return Ok(true);
    }
    let tmp = std::env::temp_dir().join(format!("informerd-api-gen-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let result = generate(&tmp).and_then(|()| {
        let fresh = std::fs::read(tmp.join(FILE))?;
        let current = std::fs::read(dest.join(FILE)).unwrap_or_default();
        Ok(fresh == current)
    });
    let _ = std::fs::remove_dir_all(&tmp);
    let same = result?;
    if !same {
        eprintln!(
            "informerd-api-gen: {} is not what proto/ generates; run `cargo run -p informerd-api-gen`",
            dest.join(FILE).display()
        );
    }
    Ok(same)
}

fn main() -> ExitCode {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(other) => {
            eprintln!("informerd-api-gen: unknown argument {other:?} (only --check)");
            return ExitCode::from(2);
        }
    };
    match run(check) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("informerd-api-gen: {e}");
            ExitCode::FAILURE
        }
    }
}
