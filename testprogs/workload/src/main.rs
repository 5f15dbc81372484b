//! `workload [N]`: builds N JSON records, parses them back with serde_json, matches their messages
//! with a regex, and sorts and sums them with rayon on two threads. Each phase is its own function
//! (never inlined, so that each has a sled) and prints what it computed, so nothing is optimized away.
use std::hint::black_box;

use rayon::prelude::*;
use regex::Regex;
use serde_json::Value;

/// N records as one JSON array. Record `i` nests as deep as `i` has bits, an array for each set bit
/// and an object for each clear one, so that every record takes its own path through the recursion of
/// the parser, the printer and the destructor: the number of distinct call paths grows with N.
#[inline(never)]
fn make_json(n: usize) -> String {
    let mut items = Vec::with_capacity(n);
    for i in 0..n {
        let mut nested = serde_json::json!({ "leaf": i });
        let mut bits = i;
        while bits > 0 {
            nested = if bits & 1 == 1 {
                serde_json::json!([nested, bits])
            } else {
                serde_json::json!({ "level": bits, "inner": nested })
            };
            bits >>= 1;
        }
        items.push(serde_json::json!({
            "id": i,
            "message": format!("request {i} from host{}.example.org took {} ms", i % 13, (i * 37) % 1000),
            "tags": ["a", "b", i.to_string()],
            "nested": nested,
        }));
    }
    Value::Array(items).to_string()
}

/// Parses the JSON back and returns every record's message.
#[inline(never)]
fn json_phase(text: &str) -> Vec<String> {
    let value: Value = serde_json::from_str(text).expect("the JSON we wrote parses");
    value
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|r| r["message"].as_str().map(str::to_owned))
        .collect()
}

/// The milliseconds of every message that names a host.
#[inline(never)]
fn regex_phase(messages: &[String]) -> Vec<u64> {
    let re = Regex::new(r"host(\d+)\.example\.org took (\d+) ms").expect("a valid regex");
    messages
        .iter()
        .filter_map(|m| re.captures(m))
        .map(|c| c[2].parse().expect("digits"))
        .collect()
}

/// Sorts the times in parallel and sums them in parallel.
#[inline(never)]
fn sort_phase(mut times: Vec<u64>) -> (u64, u64) {
    times.par_sort_unstable();
    let sum = times.par_iter().map(|&t| t * 2).sum::<u64>();
    (times[times.len() / 2], sum)
}

fn main() {
    let n = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global()
        .expect("the global pool is built once");
    let text = make_json(black_box(n));
    let messages = json_phase(&text);
    let times = regex_phase(&messages);
    let (median, sum) = sort_phase(times);
    println!("records={} median_ms={median} sum={sum}", messages.len());
}
