//! Building and installing strategy plugins for tests and benches: the Rust
//! examples with cargo (into the workspace's target directory), the C
//! example with the system C compiler, and a read-only plugin directory
//! holding copies of them with their SHA-256.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The target directory cargo uses for this workspace.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The cargo profile that built the running test or bench, and its output
/// directory: a plugin built in the same profile reuses what that build
/// compiled (its dependencies, the SDK) instead of building them again in
/// debug.
fn current_profile() -> (String, PathBuf) {
    // A test or bench binary lives in `<target>/<profile dir>/deps/`.
    let out_dir = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        if deps.file_name()? != "deps" {
            return None;
        }
        deps.parent().map(Path::to_path_buf)
    });
    let Some(out_dir) = out_dir else {
        return ("dev".to_owned(), target_dir().join("debug"));
    };
    let profile = match out_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_owned(),
        Some(other) => other.to_owned(),
    };
    (profile, out_dir)
}

/// Builds the `cdylib` of workspace package `package` in the profile of the
/// running test (debug under a plain `cargo test`) and returns the
/// library's path. Panics with cargo's output when the build fails.
pub fn build_rust_plugin(package: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let (profile, out_dir) = current_profile();
    let out = Command::new(cargo)
        .current_dir(workspace_root())
        .args(["build", "--quiet", "--profile", &profile, "-p", package])
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build {package}: {e}"));
    assert!(
        out.status.success(),
        "building plugin {package} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = format!("lib{}.so", package.replace('-', "_"));
    let path = out_dir.join(&lib);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Compiles the C example (`plugins/examples/c-noop/noop.c`) with `cc`,
/// warnings as errors, into `out_dir`, with extra `-D` definitions.
pub fn build_c_plugin(out_dir: &Path, name: &str, defines: &[&str]) -> PathBuf {
    let root = workspace_root();
    let out = out_dir.join(format!("lib{name}.so"));
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.args([
        "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-O2",
    ])
    .arg("-I")
    .arg(root.join("plugins/abi/include"));
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    cmd.arg(root.join("plugins/examples/c-noop/noop.c"))
        .arg("-o")
        .arg(&out);
    let done = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler (cc): {e}"));
    assert!(
        done.status.success(),
        "compiling the C plugin failed:\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    out
}

/// SHA-256 (hex) of a file.
pub fn sha256_of(path: &Path) -> String {
    compactd::plugin::file_sha256(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A plugin directory: copies of `libs` (as `file name → source`), made
/// read-only, in a fresh temporary directory that is then made read-only
/// too. Returns the directory (deleted on drop; permissions restored) and
/// each copy's SHA-256.
pub struct PluginDir {
    dir: tempfile::TempDir,
}

impl PluginDir {
    /// Installs `libs` (`(file name, built library)`).
    pub fn install(libs: &[(&str, &Path)]) -> PluginDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, src) in libs {
            let dst = dir.path().join(name);
            std::fs::copy(src, &dst).expect("copy plugin");
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o555))
                .expect("chmod plugin");
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555))
            .expect("chmod plugin dir");
        PluginDir { dir }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// SHA-256 of an installed file.
    pub fn sha256(&self, name: &str) -> String {
        sha256_of(&self.dir.path().join(name))
    }
}

impl Drop for PluginDir {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        // Writable again, so the temporary directory can be removed.
        let _ = std::fs::set_permissions(self.dir.path(), std::fs::Permissions::from_mode(0o755));
    }
}
