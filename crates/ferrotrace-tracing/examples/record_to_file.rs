//! Records a few `tracing` spans and events into a file of the program's own, then shows it with
//! `ferrotrace replay`:
//!
//! ```sh
//! cargo run -p ferrotrace-tracing --example record_to_file -- /tmp/example.ferrotrace
//! ferrotrace replay -i /tmp/example.ferrotrace
//! ```

use tracing_subscriber::prelude::*;

#[tracing::instrument]
fn handle(id: u64) -> u64 {
    let sum = (0..id * 1000).sum::<u64>();
    tracing::info!(sum, "handled");
    sum
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or("example.ferrotrace".into());
    tracing_subscriber::registry()
        .with(ferrotrace_tracing::FerrotraceLayer::new())
        .init();
    let guard = ferrotrace_tracing::record_to_file(&path)?;
    let _main = tracing::info_span!("main").entered();
    for id in 1..=3 {
        handle(id);
    }
    drop(_main);
    drop(guard); // the file is complete here
    println!("wrote {path}");
    Ok(())
}
