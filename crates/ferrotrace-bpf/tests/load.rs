//! The verifier accepts the programs, and they unwind this very process in the kernel (root needed).

use std::mem::MaybeUninit;

use ferrotrace_bpf::{Bpf, OpenObject};

#[test]
fn verifier_accepts_the_programs() {
    let mut storage = MaybeUninit::<OpenObject>::uninit();
    let bpf = Bpf::load(&mut storage).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bpf.stats().samples, 0);
}

/// A followed process that execs loses its mappings in the kernel at once (its samples are then
/// truncated until the new image's mappings are loaded, never unwound through the old image's).
#[test]
fn exec_drops_the_process_mappings() {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let mut storage = MaybeUninit::<OpenObject>::uninit();
    let mut bpf = Bpf::load(&mut storage).unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new("/bin/sh")
        .args(["-c", "echo ready; read line; exec /bin/true"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The shell's own exec is over once it speaks: `spawn` returns when the exec closes the
    // descriptors marked close-on-exec, before the kernel's sched_process_exec, whose program would
    // otherwise drop the mappings set below (it failed so once in CI).
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready, "ready\n");
    let pid = child.id();
    let mapping = ferrotrace_bpf::ProcessMapping {
        start: 0x1000,
        end: 0x2000,
        bias: 0,
        rows: None,
    };
    assert!(bpf.set_process(pid, &[mapping]).unwrap());
    assert!(bpf.has_process(pid));
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
    assert!(!bpf.has_process(pid), "the exec dropped them");
}

/// The shared unwind table fills, and the rows of a module given back make room for another one
/// (a recording of hours frees the tables of files no process maps any more).
#[test]
fn rows_given_back_make_room_for_another_module() {
    use ferrotrace_bpf::tables::Row;

    let mut storage = MaybeUninit::<OpenObject>::uninit();
    let mut bpf = Bpf::load(&mut storage).unwrap_or_else(|e| panic!("{e}"));
    // A quarter of the table: a row every 16 bytes of a 16 MiB module (64 Ki pages of the index).
    let quarter = ferrotrace_bpf::MAX_ROWS / 4;
    let rows: Vec<Row> = (0..quarter as u64)
        .map(|i| Row {
            pc: i * 16,
            cfa_offset: 8,
            rbp_offset: 0,
            cfa_kind: 0,
            rbp_kind: 0,
        })
        .collect();
    let placed: Vec<_> = (0..4)
        .map(|_| bpf.add_rows(&rows).expect("a quarter fits"))
        .collect();
    assert_eq!(bpf.rows_used(), ferrotrace_bpf::MAX_ROWS);
    assert_eq!(bpf.add_rows(&rows[..1]), None, "full");
    assert!(!bpf.has_room_for(&rows[..1]));
    bpf.remove_rows(placed[1]);
    assert!(bpf.has_room_for(&rows));
    assert_eq!(bpf.rows_used(), 3 * quarter);
    let again = bpf.add_rows(&rows).expect("room again");
    assert_eq!(
        (again.start, again.pages_start),
        (placed[1].start, placed[1].pages_start),
        "in the rows and pages given back"
    );
}
