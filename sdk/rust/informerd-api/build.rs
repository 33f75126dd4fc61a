//! Generates the informerd.v1 messages and tonic clients from the repository's `proto/`.
//! `protoc` comes from `PROTOC` or PATH (Debian's protobuf-compiler, which `tools/bootstrap`
//! installs).
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read when the script runs, not baked in when it is compiled: a build script compiled for
    // one checkout of the workspace may be reused for another.
    let manifest = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = PathBuf::from(manifest).join("../../../proto");
    let root = root
        .canonicalize()
        .map_err(|e| format!("proto/ at {}: {e}", root.display()))?;
    let protos: Vec<PathBuf> = ["admin", "errors", "informers", "objects", "queues", "work"]
        .iter()
        .map(|name| root.join(format!("informerd/v1/{name}.proto")))
        .collect();
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    tonic_prost_build::configure()
        .build_server(false)
        // Object JSON is handed around without copies (`bytes::Bytes` is reference-counted).
        .bytes(".informerd.v1.Object.json")
        .compile_protos(&protos, &[root])?;
    Ok(())
}
