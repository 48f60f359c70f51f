//! Generates the plugin messages (and the API messages they carry) from the
//! repository's `proto/` without a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile(["compactd/plugin/v1/plugin.proto"], [&proto])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
