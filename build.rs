//! Generates the gRPC code from `proto/` without a system `protoc`: `protox`
//! parses the files into a descriptor set, `tonic-prost-build` generates the
//! messages, server and client from it, and the encoded set is written to
//! `OUT_DIR/compactd_descriptor.bin` for server reflection.

use std::path::PathBuf;

use protox::prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["compactd/v1/compactd.proto"], ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("compactd_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
