//! Nothing to generate. This build script exists so that `protoc-bin-vendored` is a
//! build-dependency: cargo then downloads it before any build script runs, and
//! `scripts/protoc` (PROTOC, set in `.cargo/config.toml`) runs its protoc for
//! etcd-client's build. Without it a machine with only the Rust toolchain cannot build
//! the broker (etcd-client: "Could not find `protoc`").

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
