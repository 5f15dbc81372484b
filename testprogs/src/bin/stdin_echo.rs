//! Reads one line from stdin and prints `got=LINE` through a traced function.
use std::io::BufRead;

#[inline(never)]
fn answer(line: &str) -> String {
    format!("got={}", line.trim_end())
}

fn main() {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("stdin");
    println!("{}", answer(&line));
}
