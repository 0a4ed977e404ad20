// SPDX-License-Identifier: GPL-2.0 OR MIT
/* numaio's collector: bytes copied between the page cache and user buffers, per thread,
 * file, node of the data's pages and node of the CPU; page-cache inserts and removals per
 * file and node; faults on file mappings.
 *
 * The per-page copy functions (copy_page_to_iter, ...) cannot be traced on every kernel
 * (6.1 exempts lib/iov_iter.c from ftrace and kprobes), so bytes are attributed at the
 * page-cache lookups that precede each copy, which are traceable everywhere:
 * - a file operation's entry (filemap_read, filemap_splice_read, shmem_file_read_iter,
 *   generic_perform_write, iomap_file_buffered_write) records the file for the thread;
 * - filemap_read and filemap_splice_read take folios in batches (filemap_get_pages): each
 *   batch's file ranges and nodes are kept, and the bytes the file position advanced over
 *   each range are that range's node's ("position" operations);
 * - the others look up one folio at a time (shmem_get_folio, __filemap_get_folio in the
 *   file systems' write_begin): the bytes the iov_iter advanced between one lookup and the
 *   next, or the operation's exit, were copied to or from the folio looked up first
 *   ("count" operations).
 * Lookups outside such an operation are not file I/O by a process and are ignored. */

#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by the loader. */
const volatile __u32 filter_pids = 0; /* count only the tgids in `pids` */
const volatile __u32 nr_nodes = 1;    /* nodes possible; a larger decoded node is unknown */

#define NODE_UNKNOWN 0xffffffffu
#define KIND_READ 1
#define KIND_WRITE 2

struct io_key {
	__u32 pid;
	__u32 tid;
	__u64 dev; /* the kernel's s_dev; user space converts */
	__u64 ino;
	__u32 data_node;
	__u32 cpu_node;
};

struct io_val {
	__u64 read_bytes;
	__u64 write_bytes;
};

struct cache_key {
	__u64 dev;
	__u64 ino;
	__u32 node;
	__u32 pad;
};

/* Pages of one file on one node: inserted into and removed from the page cache, and
 * migrated to and from the node (the net of the four is the file's residency change there). */
struct cache_val {
	__u64 inserted_pages;
	__u64 removed_pages;
	__u64 migrated_in_pages;
	__u64 migrated_out_pages;
};

struct fault_key {
	__u32 pid;
	__u32 pad;
	__u64 dev;
	__u64 ino;
	__u32 data_node;
	__u32 cpu_node;
};

#define MAX_RANGES 32

struct range {
	__u64 start; /* file bytes [start, end) */
	__u64 end;
	__u32 node;
	__u32 pad;
};

struct op {
	__u64 dev;
	__u64 ino;
	__u32 kind;
	__u32 depth;    /* nesting of the operation's functions; 0: the thread is in none */
	__u32 by_pos;   /* a position operation (batches), else a count operation */
	__u32 nranges;  /* position: the ranges of the current batch */
	__u64 iter;     /* count: the struct iov_iter * being copied to or from */
	__u64 pos_ptr;  /* position: the loff_t * of the file position */
	__u64 mark;     /* the iov_iter count, or the file position, at the last checkpoint */
	__u32 cur_node; /* count: the node of the folio looked up last */
	__u32 has_cur;
	__u64 arg;      /* kprobe mode: an argument kept from entry for the return probe */
	__u64 sysc;     /* the thread's read + write system calls when the operation started */
	struct range ranges[MAX_RANGES];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct io_key);
	__type(value, struct io_val);
} nio_io SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct cache_key);
	__type(value, struct cache_val);
} nio_cache SEC(".maps");

/* Events not counted because a map was full. [LOST_CACHE]: page-cache events (nio_cache
 * full): when not 0, per-file counts are incomplete and user space must not derive
 * residency from them. [LOST_IO]: I/O operations and faults (a thread's nio_ops state not
 * created, nio_io or nio_faults full): the interval's byte or fault counts are short. */
#define LOST_CACHE 0
#define LOST_IO 1
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} nio_lost SEC(".maps");

/* Files whose nio_cache entries were freed when the kernel destroyed their inode, with when
 * (bpf_ktime_get_ns: CLOCK_MONOTONIC): a residency baseline of that (dev, ino) taken before
 * is of a dead inode, and counts under the key start again from zero. User space deletes
 * the records it has seen; while the map is full, entries are not freed (never unrecorded). */
struct freed_key {
	__u64 dev;
	__u64 ino;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct freed_key);
	__type(value, __u64);
} nio_freed SEC(".maps");

/* The folios a migration is moving, by tid, from the kprobe to its return probe. */
struct migration {
	__u64 dst;
	__u64 src;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct migration);
} nio_migr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct fault_key);
	__type(value, __u64);
} nio_faults SEC(".maps");

/* The file operation each thread is in, kept with the thread (created at its first
 * operation, freed with it): reaching it costs a pointer walk, where a tid-keyed hash cost a
 * hashed lookup in every program and an update copying the whole op plus a delete per
 * operation. Between operations it stays, with depth 0. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct op);
} nio_ops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} nio_pids SEC(".maps");

static __always_inline void count_lost(__u32 slot)
{
	__u64 *lost = bpf_map_lookup_elem(&nio_lost, &slot);

	if (lost)
		__sync_fetch_and_add(lost, 1);
}

static __always_inline bool wanted(__u32 tgid)
{
	if (!filter_pids)
		return true;
	return bpf_map_lookup_elem(&nio_pids, &tgid) != 0;
}

/* The node field is the top NODES_SHIFT bits of page->flags (SPARSEMEM_VMEMMAP: no section
 * field above it), and NODES_SHIFT = log2(MAX_NUMNODES) = log2(bits in nodemask_t). */
static __always_inline __u32 node_shift(void)
{
	__u32 bits = bpf_core_type_size(nodemask_t) * 8;
	__u32 shift = 0;

#pragma unroll
	for (int i = 0; i < 16; i++) {
		if ((1u << shift) < bits)
			shift++;
	}
	return shift;
}

/* The node in a flags word, with `shift` from node_shift(). */
static __always_inline __u32 node_in_shift(unsigned long flags, __u32 shift)
{
	if (nr_nodes == 1)
		return 0;
	if (shift == 0 || shift > 16)
		return NODE_UNKNOWN;
	__u32 node = (__u32)(flags >> (64 - shift));
	return node < nr_nodes ? node : NODE_UNKNOWN;
}

static __always_inline __u32 node_in(unsigned long flags)
{
	return nr_nodes == 1 ? 0 : node_in_shift(flags, node_shift());
}

static __always_inline __u32 node_of(const void *page)
{
	unsigned long flags = 0;

	if (bpf_probe_read_kernel(&flags, sizeof(flags), page))
		return NODE_UNKNOWN;
	return node_in(flags);
}

static __always_inline void file_id(struct file *f, __u64 *dev, __u64 *ino)
{
	struct inode *inode = BPF_CORE_READ(f, f_inode);

	*dev = BPF_CORE_READ(inode, i_sb, s_dev);
	*ino = BPF_CORE_READ(inode, i_ino);
}

static __always_inline __u64 iter_count(__u64 iter)
{
	return BPF_CORE_READ((struct iov_iter *)iter, count);
}

static __always_inline __u64 read_pos(__u64 pos_ptr)
{
	long long pos = 0;

	bpf_probe_read_kernel(&pos, sizeof(pos), (void *)pos_ptr);
	return pos < 0 ? 0 : (__u64)pos;
}

static __always_inline __u64 pos_value(long long pos)
{
	return pos < 0 ? 0 : (__u64)pos;
}

/* The thread's operation state, created if `create` (NULL where it cannot be). */
/* The thread's read and write system calls so far (0 without CONFIG_TASK_XACCT). The kernel
 * counts a call after its I/O, so within one call the number stays: an operation found
 * with another number belongs to an earlier call. Calls the kernel does not count (io_uring,
 * splice, the kernel's own reads) keep the number, and are taken as nested as before. */
static __always_inline __u64 task_syscalls(void)
{
	struct task_struct *t = bpf_get_current_task_btf();

	if (!bpf_core_field_exists(t->ioac))
		return 0;
	return BPF_CORE_READ(t, ioac.syscr) + BPF_CORE_READ(t, ioac.syscw);
}

static __always_inline struct op *task_op(bool create)
{
	return bpf_task_storage_get(&nio_ops, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* Starts a file operation on (dev, ino) for this thread: `iter` for a count operation,
 * `pos_ptr` for a position operation; `mark` is the iov_iter count or the file position now.
 * Only the fields an operation uses are written (the ranges when a batch comes). */
static __always_inline void op_start(__u64 dev, __u64 ino, __u32 kind, __u64 iter, __u64 pos_ptr,
				     __u64 mark)
{
	struct op *op = task_op(true);
	__u64 sysc = task_syscalls();

	if (!op) {
		count_lost(LOST_IO);
		return;
	}
	if (op->depth && op->sysc == sysc) {
		/* Nested: the outer operation stays. */
		op->depth++;
		return;
	}
	/* Not in an operation, or in one left by an earlier system call whose exit was skipped:
	 * start afresh (the skipped run is counted by the kernel, so the interval is not exact). */
	op->sysc = sysc;
	op->dev = dev;
	op->ino = ino;
	op->kind = kind;
	op->depth = 1;
	op->nranges = 0;
	op->has_cur = 0;
	op->iter = iter;
	op->pos_ptr = pos_ptr;
	op->by_pos = pos_ptr != 0;
	op->mark = mark;
	op->arg = 0;
}

/* op_start for `f`, read with probe reads (pointers that are not typed arguments). */
static __always_inline void op_enter(struct file *f, __u32 kind, __u64 iter, __u64 pos_ptr)
{
	__u64 dev, ino;

	if (!f || !wanted(bpf_get_current_pid_tgid() >> 32))
		return;
	file_id(f, &dev, &ino);
	op_start(dev, ino, kind, iter, pos_ptr, pos_ptr ? read_pos(pos_ptr) : iter_count(iter));
}

/* The operation the thread is in, or NULL. */
static __always_inline struct op *current_op(void)
{
	struct op *op = task_op(false);

	return op && op->depth ? op : 0;
}

static __always_inline void add_bytes(struct op *op, __u32 node, __u64 bytes)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct io_key k = {};
	struct io_val zero = {}, *v;

	if (!bytes)
		return;
	k.pid = id >> 32;
	k.tid = (__u32)id;
	k.dev = op->dev;
	k.ino = op->ino;
	k.data_node = node;
	k.cpu_node = bpf_get_numa_node_id();
	v = bpf_map_lookup_elem(&nio_io, &k);
	if (!v) {
		bpf_map_update_elem(&nio_io, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&nio_io, &k);
		if (!v) {
			count_lost(LOST_IO);
			return;
		}
	}
	if (op->kind == KIND_READ)
		__sync_fetch_and_add(&v->read_bytes, bytes);
	else
		__sync_fetch_and_add(&v->write_bytes, bytes);
}

/* Count operation: what the iov_iter advanced since the last checkpoint was copied with
 * the folio looked up last. */
static __always_inline void flush_count(struct op *op)
{
	__u64 now = iter_count(op->iter);

	if (op->has_cur && op->mark > now)
		add_bytes(op, op->cur_node, op->mark - now);
	op->mark = now;
}

/* Position operation: the file bytes the position advanced over, by the batch's ranges. */
static __always_inline void flush_pos(struct op *op, __u64 p1)
{
	__u64 p0 = op->mark;
	__u32 n = op->nranges;

	for (int i = 0; i < MAX_RANGES; i++) {
		if (i >= n)
			break;
		struct range *r = &op->ranges[i];
		__u64 lo = r->start > p0 ? r->start : p0;
		__u64 hi = r->end < p1 ? r->end : p1;
		if (hi > lo)
			add_bytes(op, r->node, hi - lo);
	}
	op->mark = p1;
}

/* A position operation's file position now: `known` where its pointer is `known_ptr` (read
 * by the caller from a typed argument, no probe read), else read. */
static __always_inline __u64 pos_now(struct op *op, __u64 known_ptr, __u64 known)
{
	return op->pos_ptr == known_ptr ? known : read_pos(op->pos_ptr);
}

static __always_inline void op_exit_at(__u64 known_ptr, __u64 known)
{
	struct op *op = current_op();

	if (!op)
		return;
	if (op->sysc != task_syscalls()) {
		/* Left by an earlier system call (its exit was skipped) and this call's entry was
		 * skipped too: its marks describe another call's iterator or position, drop it. */
		op->depth = 0;
		return;
	}
	if (op->depth > 1) {
		op->depth--;
		return;
	}
	if (op->by_pos)
		flush_pos(op, pos_now(op, known_ptr, known));
	else
		flush_count(op);
	op->depth = 0;
}

static __always_inline void op_exit(void)
{
	op_exit_at(0, 0);
}

/* The pages of `folio`, whose flags word is `flags`. */
static __always_inline __u64 folio_pages_in(struct folio *folio, unsigned long flags)
{
	unsigned int nr = 1;

	if (!bpf_core_enum_value_exists(enum pageflags, PG_head))
		return 1;
	if (!(flags & (1ul << bpf_core_enum_value(enum pageflags, PG_head))))
		return 1;
	if (bpf_core_field_exists(((struct folio___nr_new *)folio)->_nr_pages))
		nr = BPF_CORE_READ((struct folio___nr_new *)folio, _nr_pages);
	else if (bpf_core_field_exists(((struct folio___nr_old *)folio)->_folio_nr_pages))
		nr = BPF_CORE_READ((struct folio___nr_old *)folio, _folio_nr_pages);
	return nr ? nr : 1;
}

static __always_inline __u64 folio_pages(struct folio *folio)
{
	unsigned long flags = 0;

	if (bpf_probe_read_kernel(&flags, sizeof(flags), folio))
		return 1;
	return folio_pages_in(folio, flags);
}

/* A count operation looked up `folio`: the bytes since the last lookup were the previous
 * folio's. */
static __always_inline void looked_up(struct folio *folio)
{
	struct op *op = current_op();

	if (!op || op->by_pos)
		return;
	flush_count(op);
	op->cur_node = node_of(folio);
	op->has_cur = 1;
}

/* A position operation took a new batch of folios. */
static __always_inline void batch(struct folio_batch *fb, __u64 known_ptr, __u64 known)
{
	struct op *op = current_op();
	__u64 base = bpf_core_field_offset(struct folio_batch, folios);
	unsigned char nr = 0;
	__u32 n = 0;

	if (!op || !op->by_pos)
		return;
	flush_pos(op, pos_now(op, known_ptr, known));
	bpf_probe_read_kernel(&nr, sizeof(nr), (void *)fb + bpf_core_field_offset(struct folio_batch, nr));
	for (int i = 0; i < MAX_RANGES; i++) {
		struct folio *folio = 0;
		if (i >= nr)
			break;
		if (bpf_probe_read_kernel(&folio, sizeof(folio), (void *)fb + base + i * sizeof(void *)) || !folio)
			break;
		unsigned long flags = 0;
		/* One read of the flags word serves the page count and the node. */
		if (bpf_probe_read_kernel(&flags, sizeof(flags), folio))
			break;
		__u64 start = (__u64)BPF_CORE_READ(folio, index) << 12;
		__u64 len = folio_pages_in(folio, flags) << 12;
		struct range *r = &op->ranges[i & (MAX_RANGES - 1)];
		r->start = start;
		r->end = start + len;
		r->node = node_in(flags);
		n = i + 1;
	}
	op->nranges = n;
}

/* batch() for a typed `fb` (fexit): the same, with the batch and its folios read directly
 * (plain loads, where each probe read is a helper call). The verifier wants constant offsets
 * into the batch, hence the unrolled loop, bounded by the running kernel's batch size. */
static __always_inline void batch_btf(struct folio_batch *fb, __u64 known_ptr, __u64 known)
{
	struct op *op = current_op();
	__u64 base = bpf_core_field_offset(struct folio_batch, folios);
	__u32 cap = bpf_core_field_size(struct folio_batch, folios) / sizeof(void *);
	__u32 n = 0, nr, shift;
	void *slots;

	if (!op || !op->by_pos)
		return;
	flush_pos(op, pos_now(op, known_ptr, known));
	/* The offset stays in a register: folded into the loads, its relocation would be checked
	 * against the array's size, which differs between kernels. */
	asm volatile("" : "+r"(base));
	slots = (void *)fb + base;
	nr = fb->nr;
	shift = nr_nodes == 1 ? 0 : node_shift();
#pragma unroll
	for (int i = 0; i < MAX_RANGES; i++) {
		if (i >= nr || i >= cap)
			break;
		struct folio *folio = *(struct folio **)(slots + i * sizeof(void *));
		if (!folio)
			break;
		unsigned long flags = *(unsigned long *)folio;
		unsigned int pages = 1;
		if (bpf_core_enum_value_exists(enum pageflags, PG_head) &&
		    (flags & (1ul << bpf_core_enum_value(enum pageflags, PG_head)))) {
			if (bpf_core_field_exists(((struct folio___nr_new *)folio)->_nr_pages))
				pages = ((struct folio___nr_new *)folio)->_nr_pages;
			else if (bpf_core_field_exists(((struct folio___nr_old *)folio)->_folio_nr_pages))
				pages = ((struct folio___nr_old *)folio)->_folio_nr_pages;
			if (!pages)
				pages = 1;
		}
		__u64 start = (__u64)folio->index << 12;
		struct range *r = &op->ranges[i];
		r->start = start;
		r->end = start + ((__u64)pages << 12);
		r->node = node_in_shift(flags, shift);
		n = i + 1;
	}
	op->nranges = n;
}

static __always_inline bool is_err_or_null(const void *p)
{
	return !p || (unsigned long)p >= (unsigned long)-4095;
}

/* The counters of (dev, ino, node), created at 0 if new; NULL (and the loss counted) when
 * the map is full. */
static __always_inline struct cache_val *cache_slot(__u64 dev, __u64 ino, __u32 node)
{
	struct cache_key k = {};
	struct cache_val zero = {}, *v;

	k.dev = dev;
	k.ino = ino;
	k.node = node;
	v = bpf_map_lookup_elem(&nio_cache, &k);
	if (v)
		return v;
	bpf_map_update_elem(&nio_cache, &k, &zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(&nio_cache, &k);
	if (!v)
		count_lost(LOST_CACHE);
	return v;
}

static __always_inline void cache_event(struct folio *folio, bool insert)
{
	struct cache_val *v;
	__u64 pages = folio_pages(folio);

	v = cache_slot(BPF_CORE_READ(folio, mapping, host, i_sb, s_dev),
		       BPF_CORE_READ(folio, mapping, host, i_ino), node_of(folio));
	if (!v)
		return;
	if (insert)
		__sync_fetch_and_add(&v->inserted_pages, pages);
	else
		__sync_fetch_and_add(&v->removed_pages, pages);
}

/* PAGE_MAPPING_ANON | PAGE_MAPPING_MOVABLE: the low bits of folio->mapping that mark
 * anonymous and driver-owned memory, which is not page cache. */
#define MAPPING_FLAGS 3ul

/* A migration moved `src`'s contents to `dst` (move_to_new_folio succeeded): where `dst`
 * belongs to a file, its pages left src's node for dst's. At this point dst has taken src's
 * place in the page cache (dst->mapping is the file's) and both still carry their flags. */
static __always_inline void migrated(struct folio *dst, struct folio *src)
{
	struct address_space *mapping = BPF_CORE_READ(dst, mapping);
	struct inode *host;
	struct cache_val *from, *to;
	__u32 n_from, n_to;
	__u64 dev, ino, pages;

	if (!mapping || ((unsigned long)mapping & MAPPING_FLAGS))
		return;
	host = BPF_CORE_READ(mapping, host);
	if (!host)
		return;
	n_from = node_of(src);
	n_to = node_of(dst);
	if (n_from == n_to)
		return;
	dev = BPF_CORE_READ(host, i_sb, s_dev);
	ino = BPF_CORE_READ(host, i_ino);
	pages = folio_pages(src);
	from = cache_slot(dev, ino, n_from);
	to = cache_slot(dev, ino, n_to);
	if (from)
		__sync_fetch_and_add(&from->migrated_out_pages, pages);
	if (to)
		__sync_fetch_and_add(&to->migrated_in_pages, pages);
}

/* Nodes whose entries an inode's destruction frees; a larger machine's entries above it stay
 * (its baselines are still dropped, so answers stay right). */
#define MAX_FREED_NODES 64

/* The kernel destroys an inode: its pages have left the page cache (each removal counted),
 * so its counters are of no further use; free them, once the freeing is recorded. */
static __always_inline void inode_gone(struct inode *inode)
{
	struct cache_key k = {};
	struct freed_key fk = {};
	__u64 now;
	bool any = false;

	k.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	k.ino = BPF_CORE_READ(inode, i_ino);
	k.node = NODE_UNKNOWN;
	any = bpf_map_lookup_elem(&nio_cache, &k) != 0;
	for (__u32 n = 0; n < MAX_FREED_NODES && !any; n++) {
		if (n >= nr_nodes)
			break;
		k.node = n;
		any = bpf_map_lookup_elem(&nio_cache, &k) != 0;
	}
	if (!any)
		return;
	fk.dev = k.dev;
	fk.ino = k.ino;
	now = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&nio_freed, &fk, &now, BPF_ANY))
		return;
	k.node = NODE_UNKNOWN;
	bpf_map_delete_elem(&nio_cache, &k);
	for (__u32 n = 0; n < MAX_FREED_NODES; n++) {
		if (n >= nr_nodes)
			break;
		k.node = n;
		bpf_map_delete_elem(&nio_cache, &k);
	}
}

/* VM_FAULT_ERROR | VM_FAULT_RETRY: no page was mapped. */
#define FAULT_NO_PAGE 0x0c73u

static __always_inline void fault_done(struct vm_fault *vmf, unsigned int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct fault_key k = {};
	struct page *page;
	struct file *f;
	__u64 one = 1, *v;

	if (ret & FAULT_NO_PAGE || !wanted(id >> 32))
		return;
	page = BPF_CORE_READ(vmf, page);
	f = BPF_CORE_READ(vmf, vma, vm_file);
	if (!page || !f)
		return;
	k.pid = id >> 32;
	file_id(f, &k.dev, &k.ino);
	k.data_node = node_of(page);
	k.cpu_node = bpf_get_numa_node_id();
	v = bpf_map_lookup_elem(&nio_faults, &k);
	if (v)
		__sync_fetch_and_add(v, 1);
	else if (bpf_map_update_elem(&nio_faults, &k, &one, BPF_NOEXIST)) {
		/* Another CPU may have created it meanwhile. */
		v = bpf_map_lookup_elem(&nio_faults, &k);
		if (v)
			__sync_fetch_and_add(v, 1);
		else
			count_lost(LOST_IO);
	}
}

/* ---- fentry / fexit ---- */

/* The cached-read path, taken once or more per read(2): the typed arguments are read
 * directly (the verifier makes these plain loads), not with probe-read helper calls. */
SEC("fentry/filemap_read")
int BPF_PROG(nio_fe_rd, struct kiocb *iocb, struct iov_iter *iter)
{
	struct file *f = iocb->ki_filp;
	struct inode *inode;

	if (!f || !wanted(bpf_get_current_pid_tgid() >> 32))
		return 0;
	inode = f->f_inode;
	if (!inode)
		return 0;
	op_start(inode->i_sb->s_dev, inode->i_ino, KIND_READ, 0,
		 (__u64)iocb + bpf_core_field_offset(struct kiocb, ki_pos), pos_value(iocb->ki_pos));
	return 0;
}

SEC("fexit/filemap_read")
int BPF_PROG(nio_fx_rd, struct kiocb *iocb)
{
	op_exit_at((__u64)iocb + bpf_core_field_offset(struct kiocb, ki_pos), pos_value(iocb->ki_pos));
	return 0;
}

/* filemap_splice_read(in, ppos, pipe, len, flags) */
SEC("fentry/filemap_splice_read")
int BPF_PROG(nio_fe_splice, struct file *in, long long *ppos)
{
	op_enter(in, KIND_READ, 0, (__u64)ppos);
	return 0;
}

SEC("fexit/filemap_splice_read")
int BPF_PROG(nio_fx_splice)
{
	op_exit();
	return 0;
}

/* filemap_get_pages(iocb, iter or count, fbatch, ...): fbatch is the third argument. */
SEC("fexit/filemap_get_pages")
int BPF_PROG(nio_fx_batch, struct kiocb *iocb, void *x, struct folio_batch *fb)
{
	batch_btf(fb, (__u64)iocb + bpf_core_field_offset(struct kiocb, ki_pos), pos_value(iocb->ki_pos));
	return 0;
}

SEC("fentry/shmem_file_read_iter")
int BPF_PROG(nio_fe_shrd, struct kiocb *iocb, struct iov_iter *iter)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_READ, (__u64)iter, 0);
	return 0;
}

SEC("fexit/shmem_file_read_iter")
int BPF_PROG(nio_fx_shrd)
{
	op_exit();
	return 0;
}

SEC("fentry/generic_perform_write")
int BPF_PROG(nio_fe_wr, struct kiocb *iocb, struct iov_iter *iter)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_WRITE, (__u64)iter, 0);
	return 0;
}

SEC("fexit/generic_perform_write")
int BPF_PROG(nio_fx_wr)
{
	op_exit();
	return 0;
}

SEC("fentry/iomap_file_buffered_write")
int BPF_PROG(nio_fe_iomapwr, struct kiocb *iocb, struct iov_iter *iter)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_WRITE, (__u64)iter, 0);
	return 0;
}

SEC("fexit/iomap_file_buffered_write")
int BPF_PROG(nio_fx_iomapwr)
{
	op_exit();
	return 0;
}

/* FUSE's write_iter: without the writeback cache FUSE copies writes into its page cache in
 * its own loop (fuse_perform_write, static and inlined on some builds) with folios from
 * __filemap_get_folio; with it, through generic_perform_write, which nests (the outer
 * operation stays). Direct I/O looks up no folio and so counts nothing. */
SEC("fentry/fuse_file_write_iter")
int BPF_PROG(nio_fe_fusewr, struct kiocb *iocb, struct iov_iter *from)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_WRITE, (__u64)from, 0);
	return 0;
}

SEC("fexit/fuse_file_write_iter")
int BPF_PROG(nio_fx_fusewr)
{
	op_exit();
	return 0;
}

/* shmem_get_folio(inode, index, [write_end,] foliop, sgp): the folio pointer is the
 * second-to-last argument (four arguments before 6.10, five since). */
SEC("fexit/shmem_get_folio")
int nio_fx_shget(unsigned long long *ctx)
{
	__u64 nargs = bpf_get_func_arg_cnt(ctx), foliop = 0, ret = 0;
	struct folio *folio = 0;

	if (nargs < 2 || bpf_get_func_ret(ctx, &ret) || ret)
		return 0;
	if (bpf_get_func_arg(ctx, (__u32)(nargs - 2), &foliop) || !foliop)
		return 0;
	bpf_probe_read_kernel(&folio, sizeof(folio), (void *)foliop);
	if (!is_err_or_null(folio))
		looked_up(folio);
	return 0;
}

/* shmem_get_folio_gfp(inode, index, foliop, ...) before 6.10, (inode, index, write_end,
 * foliop, ...) since: where shmem_get_folio is only a wrapper, the reads call this one. The
 * third argument is the folio pointer's address (a kernel pointer) or a file offset. */
SEC("fexit/shmem_get_folio_gfp")
int nio_fx_shgetgfp(unsigned long long *ctx)
{
	__u64 a2 = 0, foliop = 0, ret = 0;
	struct folio *folio = 0;

	if (bpf_get_func_ret(ctx, &ret) || ret || bpf_get_func_arg(ctx, 2, &a2))
		return 0;
	if (a2 >= 0xffff800000000000ull)
		foliop = a2;
	else if (bpf_get_func_arg(ctx, 3, &foliop))
		return 0;
	if (!foliop)
		return 0;
	bpf_probe_read_kernel(&folio, sizeof(folio), (void *)foliop);
	if (!is_err_or_null(folio))
		looked_up(folio);
	return 0;
}

/* __filemap_get_folio(mapping, index, fgp_flags, gfp), or since 6.16
 * __filemap_get_folio_mpol(..., policy) -> folio (NULL or an error if none) */
SEC("fexit/__filemap_get_folio")
int nio_fx_get(unsigned long long *ctx)
{
	__u64 ret = 0;

	if (!bpf_get_func_ret(ctx, &ret) && !is_err_or_null((void *)ret))
		looked_up((struct folio *)ret);
	return 0;
}

SEC("fexit/filemap_fault")
int BPF_PROG(nio_fx_fault, struct vm_fault *vmf, unsigned int ret)
{
	fault_done(vmf, ret);
	return 0;
}

SEC("fexit/shmem_fault")
int BPF_PROG(nio_fx_shfault, struct vm_fault *vmf, unsigned int ret)
{
	fault_done(vmf, ret);
	return 0;
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(nio_tp_add, struct folio *folio)
{
	cache_event(folio, true);
	return 0;
}

SEC("tp_btf/mm_filemap_delete_from_page_cache")
int BPF_PROG(nio_tp_del, struct folio *folio)
{
	cache_event(folio, false);
	return 0;
}

/* __destroy_inode(inode): every inode's end (after evict() truncated its pages). */
SEC("fentry/__destroy_inode")
int BPF_PROG(nio_fe_destroy, struct inode *inode)
{
	inode_gone(inode);
	return 0;
}

SEC("kprobe/__destroy_inode")
int BPF_KPROBE(nio_kp_destroy, struct inode *inode)
{
	inode_gone(inode);
	return 0;
}

/* move_to_new_folio(dst, src, mode) -> 0 on success: every migration of a folio (move_pages,
 * mbind, NUMA balancing, compaction, memory tiering) goes through it. */
SEC("fexit/move_to_new_folio")
int BPF_PROG(nio_fx_migrate, struct folio *dst, struct folio *src, int mode, int ret)
{
	if (ret == 0)
		migrated(dst, src);
	return 0;
}

/* ---- kprobe / kretprobe: the same, where BPF trampolines are refused ---- */

SEC("kprobe/move_to_new_folio")
int BPF_KPROBE(nio_kp_migrate, struct folio *dst, struct folio *src)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct migration m = {(__u64)dst, (__u64)src};

	bpf_map_update_elem(&nio_migr, &tid, &m, BPF_ANY);
	return 0;
}

SEC("kretprobe/move_to_new_folio")
int BPF_KRETPROBE(nio_kr_migrate, int ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct migration *m = bpf_map_lookup_elem(&nio_migr, &tid);

	if (!m)
		return 0;
	if (ret == 0)
		migrated((struct folio *)m->dst, (struct folio *)m->src);
	bpf_map_delete_elem(&nio_migr, &tid);
	return 0;
}

SEC("kprobe/filemap_read")
int BPF_KPROBE(nio_kp_rd, struct kiocb *iocb)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_READ, 0,
		 (__u64)iocb + bpf_core_field_offset(struct kiocb, ki_pos));
	return 0;
}

SEC("kprobe/filemap_splice_read")
int BPF_KPROBE(nio_kp_splice, struct file *in, long long *ppos)
{
	op_enter(in, KIND_READ, 0, (__u64)ppos);
	return 0;
}

/* generic_perform_write(iocb, from), iomap_file_buffered_write(iocb, from, ...) and
 * fuse_file_write_iter(iocb, from): a write from `from`, a count operation. */
SEC("kprobe/write")
int BPF_KPROBE(nio_kp_wr, struct kiocb *iocb, struct iov_iter *from)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_WRITE, (__u64)from, 0);
	return 0;
}

/* __filemap_get_folio[_mpol](...) -> folio (NULL or an error if none) */
SEC("kretprobe/__filemap_get_folio")
int BPF_KRETPROBE(nio_kr_get, void *ret)
{
	if (!is_err_or_null(ret))
		looked_up((struct folio *)ret);
	return 0;
}

/* One return probe ends any of the operations above. */
SEC("kretprobe/op")
int BPF_KRETPROBE(nio_kr_op)
{
	op_exit();
	return 0;
}

SEC("kprobe/filemap_get_pages")
int BPF_KPROBE(nio_kp_batch, void *iocb, void *x, struct folio_batch *fb)
{
	struct op *op = current_op();

	if (op)
		op->arg = (__u64)fb;
	return 0;
}

SEC("kretprobe/filemap_get_pages")
int BPF_KRETPROBE(nio_kr_batch)
{
	struct op *op = current_op();

	if (op && op->arg)
		batch((struct folio_batch *)op->arg, 0, 0);
	return 0;
}
