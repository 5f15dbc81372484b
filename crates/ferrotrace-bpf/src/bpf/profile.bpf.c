// SPDX-License-Identifier: MIT OR Apache-2.0
//
// ferrotrace's in-kernel profiler: on every sample (cpu-clock, a tracepoint, a uprobe) it unwinds the
// user stack of the current thread *in the kernel* -- by DWARF CFI rows that user space built from
// .eh_frame, or by frame pointers where a module has no rows -- takes the kernel stack with
// bpf_get_stackid, and adds the sample's weight to a count per (process, thread, sampler, kernel
// stack, user stack). No stack bytes go to user space: it reads the counts and the distinct stacks.
//
// The layouts shared with user space (struct row, mapping, process, ustack, count_key, the flag and
// statistic numbers) are mirrored in src/maps.rs, which checks their sizes.
//
// No vmlinux.h: the few kernel types used are declared here (pt_regs is the x86_64 ABI's layout).

typedef unsigned char __u8;
typedef signed short __s16;
typedef unsigned short __u16;
typedef signed int __s32;
typedef unsigned int __u32;
typedef signed long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>

// Map types and flags of the kernel ABI (include/uapi/linux/bpf.h).
#define MAP_HASH 1
#define MAP_ARRAY 2
#define MAP_PERCPU_ARRAY 6
#define MAP_STACK_TRACE 7
#define MAP_TASK_STORAGE 29
#define STORAGE_CREATE 1
#define F_NO_PREALLOC 1
#define F_MMAPABLE (1U << 10)
#define UPDATE_ANY 0
#define UPDATE_NOEXIST 1

// x86_64 struct pt_regs (arch/x86/include/uapi/asm/ptrace.h).
struct user_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

struct task_struct;

#define MAX_DEPTH 127         // user frames kept (perf's default too)
#define MAX_MAPPINGS 512      // executable mappings per process
#define MAX_SLOTS 1024        // processes' mapping lists held at once
#define MAPPING_SEARCH_STEPS 10
#define MAX_ROWS (1U << 22)   // unwind rows of all modules together
#define PAGE_SHIFT 8          // the page index's granule: 256 bytes of text
#define MAX_PAGES (1U << 22)  // page index entries of all modules together (1 GiB of text)
// Bytes of the user stack read at once at each sample, from its stack pointer up: the frames whose
// saved words fall inside are unwound from this copy, one read instead of one or two per frame.
#define STACK_WINDOW 4096 // at most PAGE_SIZE (see read_window)
// Bytes read at most when the unwinder moves the window up the stack, and words kept below the word
// that moved it.
#define STACK_REFILL 1024
#define REFILL_BELOW 4
#define PAGE_SIZE 4096
// Rows start at distinct addresses, so a 256-byte page holds at most 256 of them: 9 steps.
#define ROW_SEARCH_STEPS (PAGE_SHIFT + 1)

// How a row finds the CFA (the caller's stack pointer).
#define CFA_NONE 0        // no CFI covers the address: walk by frame pointer
#define CFA_RSP 1         // cfa = rsp + cfa_offset
#define CFA_RBP 2         // cfa = rbp + cfa_offset
#define CFA_PLT 3         // a PLT entry: cfa = rsp + 8, + 8 past its push (the glibc/binutils expression)
#define CFA_END 4         // the return address is undefined: the outermost frame (_start, clone)
#define CFA_UNSUPPORTED 5 // a rule of another form (signal frames, other expressions)

// How a row restores rbp.
#define RBP_SAME 0     // unchanged
#define RBP_AT_CFA 1   // rbp = *(cfa + rbp_offset)
#define RBP_UNKNOWN 2  // a rule of another form: rbp is lost from here on

// ustack.flags: why a stack ended early (any TRUNC_* bit), and how it was walked.
#define TRUNC_NO_PROCESS (1U << 0)  // the process has no mappings loaded yet
#define TRUNC_NO_MAPPING (1U << 1)  // an address in no known executable mapping (JIT code, a new library)
#define TRUNC_READ (1U << 2)        // the stack could not be read (paged out, bad pointer)
#define TRUNC_DEPTH (1U << 3)       // deeper than MAX_DEPTH
#define TRUNC_UNSUPPORTED (1U << 4) // a CFI rule this unwinder does not follow
#define TRUNC_BAD_FP (1U << 5)      // a frame-pointer chain that does not go up the stack
#define WALKED_FP (1U << 8)         // at least one frame by frame pointer
#define TRUNC_MASK 0xffU
#define RBP_LOST_FLAG (1U << 15)    // while unwinding: the caller's rbp is not known

// Statistics, one counter per CPU each.
#define STAT_SAMPLES 0
#define STAT_TRUNCATED 1
#define STAT_USTACKS_FULL 2
#define STAT_COUNTS_FULL 3
#define STAT_NO_USER 4
#define STAT_KSTACK_FAILED 5
#define STAT_FRAMES 6
#define STAT_USER_READS 7 // reads of user memory by the unwinder (the window, words beyond it)
#define NSTATS 8

struct row {
	__u64 pc;         // stated address (as in the file) where the row starts
	__s32 cfa_offset;
	__s16 rbp_offset;
	__u8 cfa_kind;
	__u8 rbp_kind;
};

struct mapping {
	__u64 start;       // runtime addresses [start, end)
	__u64 end;
	__u64 bias;        // runtime minus stated address
	__u32 rows_start;  // the module's rows in `rows`: [rows_start, rows_start + rows_len)
	__u32 rows_len;    // 0: no rows, walk by frame pointer
	__u64 page_base;   // stated address of the module's first page (its first row's, rounded down)
	__u32 pages_start; // its page index in `pages`: pages_len entries from pages_start
	__u32 pages_len;
};

// One page of a module's text: its rows start at or after row `lo` and before row `hi` (relative to
// the module's first row); the row in force at the page's start is row lo - 1 (none when lo is 0).
struct page {
	__u32 lo;
	__u32 hi;
};

// A process's mappings, sorted by start, are entries [slot * MAX_MAPPINGS, + count) of `mappings`.
// User space writes a changed list into a fresh slot, then points the process at it.
struct process {
	__u32 slot;
	__u32 count;
};

struct ustack {
	__u32 len;
	__u32 flags;
	__u64 addrs[MAX_DEPTH + 1]; // the leaf's exact ip, then return addresses
};

struct count_key {
	__u32 pid;
	__u32 tid;
	__s32 kstack;      // id in kstacks, negative when none
	__u32 sampler;     // the attach cookie: which event
	__u64 ustack;      // key in ustacks, 0 when none
	__u64 uleaf;       // the user stack's leaf address (0 without one): kept when ustacks is full
};

// What a count map holds per key: samples, and (off-CPU) the nanoseconds they stand for.
struct count {
	__u64 samples;
	__u64 weight;
};

struct unwind_state {
	struct ustack out;
	__u64 ip, sp, bp;
	__u64 bp_at;         // when not 0, rbp is the word at this address, not `bp` (read when needed)
	__u64 hash;
	struct mapping last; // the mapping of the previous frame: most callers are in the same module
	__u32 slot;          // the process's mapping list (struct process)
	__u32 count;
	__u32 done;
	__u64 window_base;   // the user stack's bytes [window_base, + window_len) are in `window`
	__u64 window_len;    // a multiple of 8
	__u64 window[STACK_WINDOW / 8];
};

struct {
	__uint(type, MAP_ARRAY);
	__uint(map_flags, F_MMAPABLE);
	__uint(max_entries, MAX_ROWS);
	__type(key, __u32);
	__type(value, struct row);
} rows SEC(".maps");

// The page index: a struct page per page of each module's text (8 bytes: an array map's values are
// laid out 8-byte aligned in its memory, which user space writes directly).
struct {
	__uint(type, MAP_ARRAY);
	__uint(map_flags, F_MMAPABLE);
	__uint(max_entries, MAX_PAGES);
	__type(key, __u32);
	__type(value, struct page);
} pages SEC(".maps");

struct {
	__uint(type, MAP_HASH);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct process);
} processes SEC(".maps");

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, MAX_SLOTS * MAX_MAPPINGS);
	__type(key, __u32);
	__type(value, struct mapping);
} mappings SEC(".maps");

struct {
	__uint(type, MAP_HASH);
	__uint(max_entries, 32768);
	__type(key, __u64);
	__type(value, struct ustack);
} ustacks SEC(".maps");

struct {
	__uint(type, MAP_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} kstacks SEC(".maps");

// Per thread: the end of its user stack, learnt when a stack window first ran past it (a read that
// runs into an unmapped page costs a page fault; a known end spares the next samples that). Freed
// with the thread, dropped at exec.
struct {
	__uint(type, MAP_TASK_STORAGE);
	__uint(map_flags, F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} stack_ends SEC(".maps");

// Two count maps: the samples go to the one `control[0]` names while user space drains the other.
struct {
	__uint(type, MAP_HASH);
	__uint(max_entries, 65536);
	__type(key, struct count_key);
	__type(value, struct count);
} counts0 SEC(".maps");

struct {
	__uint(type, MAP_HASH);
	__uint(max_entries, 65536);
	__type(key, struct count_key);
	__type(value, struct count);
} counts1 SEC(".maps");

// Off-CPU: the stack and time at which a followed thread left the CPU, until it comes back.
struct off_cpu_start {
	struct count_key key;
	__u64 time;
};

struct {
	__uint(type, MAP_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct off_cpu_start);
} off_cpu SEC(".maps");

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} control SEC(".maps");

struct {
	__uint(type, MAP_PERCPU_ARRAY);
	__uint(max_entries, NSTATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, MAP_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_state);
} scratch SEC(".maps");

static __always_inline void stat_add(__u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += n;
}

// The binary searches are global functions: the verifier checks each once, on its own, instead of
// once per path into it (inlined, their branches multiplied past the verifier's 1M-instruction limit).

// The key in `mappings` of the mapping that holds `addr` among a process's `count` mappings from
// `slot`, or -1. (The entries are looked up by key, not indexed in one map value: an index into a
// value makes the verifier track every path through the search separately.)
__noinline int find_mapping(__u32 slot, __u32 count, __u64 addr)
{
	// `count` is not clamped: user space keeps it <= MAX_MAPPINGS, and a bounded `hi` would let the
	// verifier tell the searches' paths apart by range (10 steps cost it 950,000 instructions).
	__u32 base = slot * MAX_MAPPINGS, lo = 0, hi = count;
	for (int i = 0; i < MAPPING_SEARCH_STEPS; i++) {
		if (lo >= hi)
			break;
		__u32 mid = (lo + hi) / 2;
		__u32 key = base + mid;
		struct mapping *m = bpf_map_lookup_elem(&mappings, &key);
		if (!m)
			return -1;
		if (m->start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -1;
	__u32 key = base + lo - 1;
	struct mapping *m = bpf_map_lookup_elem(&mappings, &key);
	if (!m || addr >= m->end)
		return -1;
	return key;
}

// The index in `rows` of the row in force at stated address `pc` of module `m`, or -1 before its
// first row. The page index narrows the search to the rows that start in pc's page.
__noinline int find_row(struct mapping *m, __u64 pc)
{
	if (!m || pc < m->page_base)
		return -1;
	__u64 page = (pc - m->page_base) >> PAGE_SHIFT;
	if (page >= m->pages_len)
		page = m->pages_len - 1; // past the last page: its rows are all before pc
	__u32 key = m->pages_start + (__u32)page;
	struct page *p = bpf_map_lookup_elem(&pages, &key);
	if (!p)
		return -1;
	// The first row that starts after pc, among [lo, hi): rows before lo start before the page.
	__u32 lo = p->lo, hi = p->hi, start = m->rows_start;
	for (int i = 0; i < ROW_SEARCH_STEPS; i++) {
		if (lo >= hi)
			break;
		__u32 mid = (lo + hi) / 2;
		key = start + mid;
		struct row *r = bpf_map_lookup_elem(&rows, &key);
		if (!r)
			return -1;
		if (r->pc <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -1;
	return start + lo - 1;
}

static __always_inline int read_user(__u64 *dst, __u64 addr)
{
	stat_add(STAT_USER_READS, 1);
	return bpf_probe_read_user(dst, sizeof(*dst), (const void *)addr);
}

// Copies the user stack from `sp` up into the window: STACK_WINDOW bytes, or up to the thread's
// stack end when known and sooner. When the read fails, the window ran past the stack's end (the top
// of the main thread's stack, a thread's stack below an unmapped page): as STACK_WINDOW is at most a
// page, that end is the end of sp's page, which is mapped. The window is then the rest of that page,
// and the end is kept for the thread's next samples (it is never wrong for long: a read that fails
// learns it again, and a stack does not grow up).
static __always_inline void read_window(struct unwind_state *st, struct task_struct *task, __u64 sp)
{
	__u64 len = STACK_WINDOW;
	__u64 *end = bpf_task_storage_get(&stack_ends, task, 0, 0);
	if (end && *end > sp && *end - sp < STACK_WINDOW)
		len = (*end - sp) & ~7ULL;
	st->window_base = sp;
	stat_add(STAT_USER_READS, 1);
	if (bpf_probe_read_user(st->window, len, (const void *)sp)) {
		__u64 page_end = (sp | (PAGE_SIZE - 1)) + 1;
		len = (page_end - sp) & ~7ULL;
		if (len > STACK_WINDOW)
			len = STACK_WINDOW;
		stat_add(STAT_USER_READS, 1);
		if (len == 0 || bpf_probe_read_user(st->window, len, (const void *)sp)) {
			len = 0;
		} else {
			end = bpf_task_storage_get(&stack_ends, task, 0, STORAGE_CREATE);
			if (end)
				*end = page_end;
		}
	}
	st->window_len = len;
}

// Reads the user stack's word at `addr`: from the window when it holds it. A word above the window
// (the outer frames of a deep or wide stack) moves the window up to it: from a few words below it
// (a frame's saved rbp lies below its return address) to the end of its page at most, so that the
// read never runs into a page past the stack's end, and STACK_REFILL bytes at most.
static __always_inline int read_stack(struct unwind_state *st, __u64 *dst, __u64 addr)
{
	__u64 off = addr - st->window_base; // huge below the window
	if (off < st->window_len && (off & 7) == 0) {
		*dst = st->window[(off / 8) & (STACK_WINDOW / 8 - 1)];
		return 0;
	}
	if ((addr & 7) || addr < st->window_base + st->window_len + 8 * REFILL_BELOW)
		return read_user(dst, addr);
	__u64 base = addr - 8 * REFILL_BELOW; // in the stack: above the part already read
	__u64 len = (addr | (PAGE_SIZE - 1)) + 1 - base;
	if (len > STACK_REFILL)
		len = STACK_REFILL;
	stat_add(STAT_USER_READS, 1);
	st->window_base = base;
	if (bpf_probe_read_user(st->window, len, (const void *)base)) {
		st->window_len = 0;
		return -1;
	}
	st->window_len = len;
	*dst = st->window[REFILL_BELOW];
	return 0;
}

// Reads the saved rbp that a frame's row pointed to, if not read yet. Most frames of optimized code
// neither use rbp for their CFA nor walk by frame pointer, so most saved rbps are never needed (and
// one beyond the stack window would cost a read of user memory). (The stack does not change while the
// program runs: the thread is stopped on this CPU.)
static __always_inline int resolve_bp(struct unwind_state *st)
{
	if (st->bp_at) {
		if (read_stack(st, &st->bp, st->bp_at))
			return -1;
		st->bp_at = 0;
	}
	return 0;
}

// One frame: records the current ip, then finds the caller's registers. Returns 1 to stop.
static long unwind_step(__u32 i, void *ctx)
{
	__u32 zero = 0;
	struct unwind_state *st = bpf_map_lookup_elem(&scratch, &zero);
	if (!st)
		return 1;
	__u32 n = st->out.len;
	if (n >= MAX_DEPTH)
		return 1;
	__u64 ip = st->ip;
	st->out.addrs[n & MAX_DEPTH] = ip;
	st->out.len = n + 1;
	st->hash = (st->hash ^ ip) * 0x100000001b3ULL;

	// A return address is looked up one byte back: it may be the first byte of the next function.
	__u64 lookup = n == 0 ? ip : ip - 1;
	struct mapping *map = &st->last;
	if (lookup < map->start || lookup >= map->end) {
		__u32 at = find_mapping(st->slot, st->count, lookup);
		struct mapping *found = bpf_map_lookup_elem(&mappings, &at); // NULL for -1
		if (!found) {
			st->out.flags |= TRUNC_NO_MAPPING;
			st->done = 1;
			return 1;
		}
		*map = *found;
	}
	struct row *r = 0;
	if (map->rows_len) {
		__u32 row = find_row(map, lookup - map->bias);
		r = bpf_map_lookup_elem(&rows, &row); // NULL for -1
	}
	__u8 kind = r ? r->cfa_kind : CFA_NONE;
	if ((kind == CFA_RBP || kind == CFA_NONE) && resolve_bp(st)) {
		st->out.flags |= TRUNC_READ;
		st->done = 1;
		return 1;
	}
	__u64 cfa, ra, bp = st->bp;
	switch (kind) {
	case CFA_END:
		st->done = 1;
		return 1;
	case CFA_RSP:
		cfa = st->sp + r->cfa_offset;
		break;
	case CFA_RBP:
		if (st->out.flags & RBP_LOST_FLAG) {
			st->out.flags |= TRUNC_UNSUPPORTED;
			st->done = 1;
			return 1;
		}
		cfa = st->bp + r->cfa_offset;
		break;
	case CFA_PLT:
		cfa = st->sp + 8 + ((ip & 15) >= (__u64)r->cfa_offset ? 8 : 0);
		break;
	case CFA_NONE: {
		// Frame pointers: [rbp] is the caller's rbp, [rbp + 8] the return address.
		if (bp == 0) {
			st->done = 1; // the outermost frame clears rbp
			return 1;
		}
		st->out.flags |= WALKED_FP;
		cfa = bp + 16;
		// The lower word first: reading a word above the window moves the window up to it.
		if (read_stack(st, &bp, st->bp) || read_stack(st, &ra, st->bp + 8)) {
			st->out.flags |= TRUNC_READ;
			st->done = 1;
			return 1;
		}
		if (bp != 0 && bp <= st->bp) {
			st->out.flags |= TRUNC_BAD_FP;
			st->done = 1;
			return 1;
		}
		goto caller;
	}
	default:
		st->out.flags |= TRUNC_UNSUPPORTED;
		st->done = 1;
		return 1;
	}
	if (read_stack(st, &ra, cfa - 8)) {
		st->out.flags |= TRUNC_READ;
		st->done = 1;
		return 1;
	}
	if (r->rbp_kind == RBP_AT_CFA) {
		st->bp_at = cfa + r->rbp_offset;
		st->out.flags &= ~RBP_LOST_FLAG;
	} else if (r->rbp_kind == RBP_UNKNOWN) {
		st->out.flags |= RBP_LOST_FLAG;
	}
caller:
	if (ra == 0) {
		st->done = 1;
		return 1;
	}
	st->ip = ra;
	st->sp = cfa;
	st->bp = bp;
	return 0;
}

// The user registers the unwinder starts from.
struct start_regs {
	__u64 ip, sp, bp;
};

// Unwinds the current thread's user stack into the scratch state, from `regs` when the caller has
// them (a sample taken in user mode), else from the registers the thread entered the kernel with;
// returns the stack's key in `ustacks` (store_user_stack puts it there), 0 when it has none, and
// its leaf address in `*leaf`.
static __always_inline __u64 unwind_user(__u32 pid, const struct start_regs *regs, __u64 *leaf)
{
	__u32 zero = 0;
	struct unwind_state *st = bpf_map_lookup_elem(&scratch, &zero);
	if (!st)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct start_regs copy;
	if (regs) {
		copy = *regs;
	} else {
		struct user_regs *entry = (struct user_regs *)bpf_task_pt_regs(task);
		struct user_regs at_entry;
		if (bpf_probe_read_kernel(&at_entry, sizeof(at_entry), entry) || (at_entry.cs & 3) != 3) {
			stat_add(STAT_NO_USER, 1);
			return 0;
		}
		copy.ip = at_entry.ip;
		copy.sp = at_entry.sp;
		copy.bp = at_entry.bp;
	}
	if (copy.ip == 0) {
		stat_add(STAT_NO_USER, 1);
		return 0;
	}
	st->ip = copy.ip;
	st->sp = copy.sp;
	st->bp = copy.bp;
	st->bp_at = 0;
	st->done = 0;
	st->out.len = 0;
	st->out.flags = 0;
	st->last.start = 0; // an empty range: the first frame searches the mappings
	st->last.end = 0;
	struct process *proc = bpf_map_lookup_elem(&processes, &pid);
	if (proc) {
		read_window(st, task, copy.sp);
		st->slot = proc->slot;
		st->count = proc->count;
		st->hash = 0xcbf29ce484222325ULL;
		bpf_loop(MAX_DEPTH, unwind_step, 0, 0);
	} else {
		// The leaf alone, as the unwinder would have recorded it before finding no mappings.
		st->out.addrs[0] = copy.ip;
		st->out.len = 1;
		st->hash = (0xcbf29ce484222325ULL ^ copy.ip) * 0x100000001b3ULL;
		st->out.flags |= TRUNC_NO_PROCESS;
		st->done = 1;
	}
	if (!st->done)
		st->out.flags |= TRUNC_DEPTH;
	st->out.flags &= ~RBP_LOST_FLAG;
	stat_add(STAT_FRAMES, st->out.len);
	if (st->out.flags & TRUNC_MASK)
		stat_add(STAT_TRUNCATED, 1);
	__u64 key = (st->hash ^ st->out.flags) * 0x100000001b3ULL;
	if (key == 0)
		key = 1;
	*leaf = copy.ip;
	return key;
}

// Puts the stack that unwind_user just left in the scratch state into `ustacks` under `key`, unless
// it is there already. User space takes the stacks out once it has read them (a count new in its
// map stores its stack again), so the map holds about one read period's distinct stacks.
static __always_inline void store_user_stack(__u64 key)
{
	__u32 zero = 0;
	struct unwind_state *st = bpf_map_lookup_elem(&scratch, &zero);
	if (!st || key == 0 || bpf_map_lookup_elem(&ustacks, &key))
		return;
	if (bpf_map_update_elem(&ustacks, &key, &st->out, UPDATE_NOEXIST) == -7 /* E2BIG: full */)
		stat_add(STAT_USTACKS_FULL, 1);
}

// Counts one sample (of `weight` ns for off-CPU, 0 otherwise) under `key` in count map `counts`.
// `store_stack`: the user stack is still in the scratch state and not stored yet; it is stored when
// the count is new (a count that exists was created after its stack was stored: most samples skip
// that lookup).
#define DEFINE_COUNT_IN(counts)                                                                  \
	static __noinline void count_in_##counts(struct count_key *key, __u64 weight, int store_stack) \
	{                                                                                          \
		struct count *v = bpf_map_lookup_elem(&counts, key);                               \
		if (!v) {                                                                          \
			if (store_stack)                                                           \
				store_user_stack(key->ustack);                                     \
			struct count first = {1, weight};                                          \
			if (!bpf_map_update_elem(&counts, key, &first, UPDATE_NOEXIST))            \
				return;                                                            \
			/* Another CPU created it meanwhile, or the map is full. */                \
			v = bpf_map_lookup_elem(&counts, key);                                     \
			if (!v) {                                                                  \
				stat_add(STAT_COUNTS_FULL, 1);                                     \
				return;                                                            \
			}                                                                          \
		}                                                                                  \
		__sync_fetch_and_add(&v->samples, 1);                                              \
		__sync_fetch_and_add(&v->weight, weight);                                          \
	}

// One function per map: a map call with a map known at the call site becomes a direct call to that
// map type's code (the verifier inlines a hash map's lookup); one whose map depends on a branch stays
// an indirect call, a retpoline on this kind of CPU.
DEFINE_COUNT_IN(counts0)
DEFINE_COUNT_IN(counts1)

// Counts one sample in the count map that `control[0]` names (see count_in_*).
static __always_inline void add_count(struct count_key *key, __u64 weight, int store_stack)
{
	__u32 zero = 0;
	__u32 *active = bpf_map_lookup_elem(&control, &zero);
	if (active && *active)
		count_in_counts1(key, weight, store_stack);
	else
		count_in_counts0(key, weight, store_stack);
}

#define NO_KERNEL_STACK -14 // what bpf_get_stackid says in user mode (EFAULT: an empty stack)

// `user_regs`: the sample was taken in user mode, at these registers; the kernel stack is then
// empty (bpf_get_stackid would set up a callchain walk to find so). The user stack is left in the
// scratch state, not stored (store_user_stack).
static __always_inline void make_key(void *ctx, struct count_key *key, __u64 pid_tgid, __u32 sampler,
				     const struct start_regs *user_regs)
{
	key->pid = pid_tgid >> 32;
	key->tid = (__u32)pid_tgid;
	key->sampler = sampler;
	key->kstack = user_regs ? NO_KERNEL_STACK : bpf_get_stackid(ctx, &kstacks, 0);
	if (key->kstack < 0 && key->kstack != NO_KERNEL_STACK)
		stat_add(STAT_KSTACK_FAILED, 1);
	key->ustack = unwind_user(key->pid, user_regs, &key->uleaf);
}

// A sample or probe hit of the event whose index is the attach cookie. Programs attached to a
// tracepoint or a uprobe run for every process that hits it (the kernel runs them before it looks at
// the events' tasks): those count only the processes whose mappings user space loaded.
static __always_inline int on_event(void *ctx, int followed_only, const struct start_regs *user_regs)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32;
	if (pid == 0)
		return 0; // the idle task
	if (followed_only && !bpf_map_lookup_elem(&processes, &pid))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct count_key key = {};
	make_key(ctx, &key, pid_tgid, (__u32)cookie, user_regs);
	stat_add(STAT_SAMPLES, 1);
	add_count(&key, 0, 1);
	return 0;
}

SEC("perf_event")
int on_perf_event(void *ctx)
{
	// A per-task event: only the followed processes' samples come here. Its context starts with the
	// registers at the sample (struct bpf_perf_event_data): in user mode, where the unwinder starts.
	struct user_regs *at_sample = ctx;
	if ((at_sample->cs & 3) == 3) {
		struct start_regs regs = {at_sample->ip, at_sample->sp, at_sample->bp};
		return on_event(ctx, 0, &regs);
	}
	return on_event(ctx, 0, 0);
}

SEC("tracepoint")
int on_tracepoint(void *ctx)
{
	return on_event(ctx, 1, 0);
}

SEC("kprobe")
int on_uprobe(void *ctx)
{
	return on_event(ctx, 1, 0);
}

// The fields of sched:sched_switch (/sys/kernel/tracing/events/sched/sched_switch/format).
struct sched_switch_args {
	__u64 common;
	char prev_comm[16];
	__s32 prev_pid;
	__s32 prev_prio;
	__s64 prev_state;
	char next_comm[16];
	__s32 next_pid;
	__s32 next_prio;
};

// Off-CPU time: at a followed thread's switch out, its stacks and the time; at its switch in, one
// sample weighing the time in between. The program runs in the context of the thread leaving.
SEC("tracepoint")
int on_sched_switch(struct sched_switch_args *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32, tid = (__u32)pid_tgid;
	if (pid != 0 && bpf_map_lookup_elem(&processes, &pid)) {
		struct off_cpu_start start = {};
		make_key(ctx, &start.key, pid_tgid, (__u32)bpf_get_attach_cookie(ctx), 0);
		store_user_stack(start.key.ustack); // the scratch state is another sample's by switch-in
		start.time = now;
		stat_add(STAT_SAMPLES, 1);
		bpf_map_update_elem(&off_cpu, &tid, &start, UPDATE_ANY);
	}
	__u32 next = ctx->next_pid;
	struct off_cpu_start *left = bpf_map_lookup_elem(&off_cpu, &next);
	if (left) {
		struct count_key key = left->key;
		__u64 off = now - left->time;
		bpf_map_delete_elem(&off_cpu, &next);
		add_count(&key, off, 0);
	}
	return 0;
}

// A followed process replaced its image: its mappings are the old image's until user space loads
// the new ones from the side-band records, a few milliseconds later. Forgetting them now makes the
// samples in between truncated (no process) instead of unwound through the wrong tables. The new
// image has a new stack too: the thread's stack end is forgotten.
SEC("tracepoint/sched/sched_process_exec")
int on_exec(void *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	bpf_map_delete_elem(&processes, &pid);
	bpf_task_storage_delete(&stack_ends, bpf_get_current_task_btf());
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
