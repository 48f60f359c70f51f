//! Generates the plugin messages (and the API messages they carry) from the
//! repository's `proto/` without a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read when the script runs, not when it is compiled: a build script
    // compiled for another checkout sharing the target dir must not read
    // that checkout's protos.
    let proto = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile(["compactd/plugin/v1/plugin.proto"], [&proto])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
