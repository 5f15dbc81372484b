// No C runtime, no C library: the program brings its own `_start` and makes its own system calls.
fn main() {
    for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
}
