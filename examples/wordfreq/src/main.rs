//! Counts word frequencies in a generated text on four threads and prints the most common words.
use std::collections::HashMap;

#[inline(never)] // so that the demo's trace shows it as a call of its own
fn generate(seed: u64, words: usize) -> String {
    const VOCAB: [&str; 12] = ["trace", "rust", "xray", "sled", "chunk", "event", "thread", "clock", "flame", "replay", "report", "perf"];
    let mut x = seed;
    let mut out = String::new();
    for _ in 0..words {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(VOCAB[(x % VOCAB.len() as u64) as usize]);
        out.push(' ');
    }
    out
}

#[inline(never)] // so that the demo's trace shows it as a call of its own
fn tokenize(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

#[inline(never)] // so that the demo's trace shows it as a call of its own
fn count(words: &[&str]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for w in words {
        *m.entry(w.to_string()).or_insert(0) += 1;
    }
    m
}

#[inline(never)] // so that the demo's trace shows it as a call of its own
fn merge(into: &mut HashMap<String, usize>, from: HashMap<String, usize>) {
    for (w, c) in from {
        *into.entry(w).or_insert(0) += c;
    }
}

#[inline(never)] // so that the demo's trace shows it as a call of its own
fn top(m: &HashMap<String, usize>, n: usize) -> Vec<(String, usize)> {
    let mut v: Vec<_> = m.iter().map(|(w, c)| (w.clone(), *c)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

fn main() {
    let handles: Vec<_> = (0..4u64)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("counter-{i}"))
                .spawn(move || {
                    let text = generate(i + 1, 2_000);
                    count(&tokenize(&text))
                })
                .expect("spawn")
        })
        .collect();
    let mut total = HashMap::new();
    for h in handles {
        merge(&mut total, h.join().expect("join"));
    }
    for (w, c) in top(&total, 5) {
        println!("{w:>8} {c}");
    }
}
