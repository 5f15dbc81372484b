//! A tokio TCP service instrumented with `tracing`, and the client that drives it, in one process:
//! `ft-tracing-service N` serves N requests of one connection and prints what it did. Each request is
//! a `handle_request` span (entered once: the handler is synchronous), with a `parse` span inside and
//! one `handled` event; the connection is an async `connection` span, entered at every poll on
//! whichever worker thread polls it. The ferrotrace layer records them while `ferrotrace record`
//! records the program, and its allocator records its allocations under `--alloc`.

use std::io::{BufRead, BufReader, Write};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tracing::instrument;
use tracing_subscriber::prelude::*;

/// Allocations recorded under `ferrotrace record --alloc`: a program that links the runtime is not
/// interposed by the preload library, so its allocator reports them.
#[global_allocator]
static ALLOC: ferrotrace::Allocator<std::alloc::System> = ferrotrace::Allocator::new(std::alloc::System);

/// The work of one request, a function of its own (traced as a function in an instrumented build).
#[inline(never)]
fn checksum(body: &str) -> u64 {
    body.bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

#[instrument(level = "debug", skip(line))]
fn parse(line: &str) -> Option<(u64, &str)> {
    let (id, body) = line.trim_end().split_once(' ')?;
    Some((id.parse().ok()?, body))
}

#[instrument(skip(line), fields(id))]
fn handle_request(conn: u64, line: &str) -> String {
    let Some((id, body)) = parse(line) else {
        tracing::warn!(line, "bad request");
        return "400\n".into();
    };
    tracing::Span::current().record("id", id);
    let sum = checksum(body);
    tracing::info!(id, status = 200u64, bytes = body.len() as u64, "handled");
    format!("200 {id} {sum:x}\n")
}

#[instrument(skip(stream))]
async fn connection(conn: u64, stream: tokio::net::TcpStream) -> std::io::Result<u64> {
    let (read, mut write) = stream.into_split();
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut served = 0;
    while let Some(line) = lines.next_line().await? {
        let reply = handle_request(conn, &line);
        write.write_all(reply.as_bytes()).await?;
        served += 1;
    }
    Ok(served)
}

/// The client, on a thread of its own with blocking sockets: one request at a time, each answered
/// before the next.
fn client(addr: std::net::SocketAddr, requests: u64) -> u64 {
    let stream = std::net::TcpStream::connect(addr).expect("connect");
    // Small requests answered one at a time: without this, Nagle and delayed ACKs wait 40 ms each.
    stream.set_nodelay(true).expect("nodelay");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    let mut ok = 0;
    for id in 0..requests {
        writeln!(writer, "{id} payload-{}", "x".repeat((id % 7) as usize)).expect("send");
        let mut reply = String::new();
        reader.read_line(&mut reply).expect("reply");
        ok += reply.starts_with("200 ") as u64;
    }
    ok
}

fn main() {
    let requests: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    tracing_subscriber::registry()
        .with(ferrotrace_tracing::FerrotraceLayer::new())
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .expect("tokio runtime");
    let served = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let client = std::thread::Builder::new()
            .name("client".into())
            .spawn(move || client(addr, requests))
            .expect("client thread");
        let (stream, _) = listener.accept().await.expect("accept");
        stream.set_nodelay(true).expect("nodelay");
        let served = tokio::spawn(connection(1, stream))
            .await
            .expect("connection task")
            .expect("connection");
        let ok = client.join().expect("client");
        assert_eq!(ok, requests);
        served
    });
    println!("requests={requests} served={served}");
}
