// SPDX-License-Identifier: GPL-2.0 OR MIT
/* numaio's collector: bytes copied between the page cache and user buffers, per thread,
 * file, node of the data's pages and node of the CPU; page-cache inserts and removals per
 * file and node; faults on file mappings. Every hook comes as fentry/fexit and as
 * kprobe/kretprobe: the loader attaches whichever the running kernel supports.
 *
 * Reads and writes are attributed in two steps: the file operation's entry (filemap_read,
 * shmem_file_read_iter, generic_perform_write, ...) records the file for the thread, then
 * each copy of one page (copy_page_to_iter, copy_folio_from_iter_atomic, ...) inside it
 * adds the bytes it returned, by the node of that page. Copies outside such an operation
 * (sockets, pipes) are not file I/O and are ignored. */

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

struct cache_val {
	__u64 inserted_pages;
	__u64 removed_pages;
};

struct fault_key {
	__u32 pid;
	__u32 pad;
	__u64 dev;
	__u64 ino;
	__u32 data_node;
	__u32 cpu_node;
};

struct op {
	__u64 dev;
	__u64 ino;
	__u32 kind;
	__u32 depth;
	__u64 page; /* kprobe path: the page being copied, for the return probe */
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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct fault_key);
	__type(value, __u64);
} nio_faults SEC(".maps");

/* The file operation each thread is in, by tid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct op);
} nio_ops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} nio_pids SEC(".maps");

static __always_inline bool wanted(__u32 tgid)
{
	if (!filter_pids)
		return true;
	return bpf_map_lookup_elem(&nio_pids, &tgid) != 0;
}

/* The node field is the top NODES_SHIFT bits of page->flags (SPARSEMEM_VMEMMAP: no section
 * field above it), and NODES_SHIFT = log2(MAX_NUMNODES) = log2(bits in nodemask_t). */
static __always_inline __u32 node_of(const void *page)
{
	unsigned long flags = 0;
	__u32 bits = bpf_core_type_size(nodemask_t) * 8;
	__u32 shift = 0;

	if (bpf_probe_read_kernel(&flags, sizeof(flags), page))
		return NODE_UNKNOWN;
	if (nr_nodes == 1)
		return 0;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		if ((1u << shift) < bits)
			shift++;
	}
	if (shift == 0 || shift > 16)
		return NODE_UNKNOWN;
	__u32 node = (__u32)(flags >> (64 - shift));
	return node < nr_nodes ? node : NODE_UNKNOWN;
}

static __always_inline void file_id(struct file *f, __u64 *dev, __u64 *ino)
{
	*dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	*ino = BPF_CORE_READ(f, f_inode, i_ino);
}

static __always_inline void op_enter(struct file *f, __u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct op *cur;
	struct op op = {};

	if (!f || !wanted(id >> 32))
		return;
	cur = bpf_map_lookup_elem(&nio_ops, &tid);
	if (cur) {
		/* Nested (splice into a file read, say): the outer operation stays. */
		cur->depth++;
		return;
	}
	file_id(f, &op.dev, &op.ino);
	op.kind = kind;
	op.depth = 1;
	bpf_map_update_elem(&nio_ops, &tid, &op, BPF_ANY);
}

static __always_inline void op_exit(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct op *cur = bpf_map_lookup_elem(&nio_ops, &tid);

	if (!cur)
		return;
	if (cur->depth > 1) {
		cur->depth--;
		return;
	}
	bpf_map_delete_elem(&nio_ops, &tid);
}

static __always_inline void add_io(struct op *op, const void *page, long bytes, __u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct io_key k = {};
	struct io_val zero = {}, *v;

	if (bytes <= 0 || op->kind != kind)
		return;
	k.pid = id >> 32;
	k.tid = (__u32)id;
	k.dev = op->dev;
	k.ino = op->ino;
	k.data_node = node_of(page);
	k.cpu_node = bpf_get_numa_node_id();
	v = bpf_map_lookup_elem(&nio_io, &k);
	if (!v) {
		bpf_map_update_elem(&nio_io, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&nio_io, &k);
		if (!v)
			return;
	}
	if (kind == KIND_READ)
		__sync_fetch_and_add(&v->read_bytes, bytes);
	else
		__sync_fetch_and_add(&v->write_bytes, bytes);
}

static __always_inline void copied(const void *page, long bytes, __u32 kind)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct op *op = bpf_map_lookup_elem(&nio_ops, &tid);

	if (op)
		add_io(op, page, bytes, kind);
}

/* kprobe path: remember the page at entry, count at return. */
static __always_inline void copy_enter(const void *page)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct op *op = bpf_map_lookup_elem(&nio_ops, &tid);

	if (op)
		op->page = (__u64)page;
}

static __always_inline void copy_return(long bytes, __u32 kind)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct op *op = bpf_map_lookup_elem(&nio_ops, &tid);

	if (op && op->page) {
		add_io(op, (const void *)op->page, bytes, kind);
		op->page = 0;
	}
}

static __always_inline __u64 folio_pages(struct folio *folio)
{
	unsigned long flags = 0;
	unsigned int nr = 1;

	if (!bpf_core_enum_value_exists(enum pageflags, PG_head))
		return 1;
	if (bpf_probe_read_kernel(&flags, sizeof(flags), folio))
		return 1;
	if (!(flags & (1ul << bpf_core_enum_value(enum pageflags, PG_head))))
		return 1;
	if (bpf_core_field_exists(((struct folio___nr_new *)folio)->_nr_pages))
		nr = BPF_CORE_READ((struct folio___nr_new *)folio, _nr_pages);
	else if (bpf_core_field_exists(((struct folio___nr_old *)folio)->_folio_nr_pages))
		nr = BPF_CORE_READ((struct folio___nr_old *)folio, _folio_nr_pages);
	return nr ? nr : 1;
}

static __always_inline void cache_event(struct folio *folio, bool insert)
{
	struct cache_key k = {};
	struct cache_val zero = {}, *v;
	__u64 pages;

	k.dev = BPF_CORE_READ(folio, mapping, host, i_sb, s_dev);
	k.ino = BPF_CORE_READ(folio, mapping, host, i_ino);
	k.node = node_of(folio);
	pages = folio_pages(folio);
	v = bpf_map_lookup_elem(&nio_cache, &k);
	if (!v) {
		bpf_map_update_elem(&nio_cache, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&nio_cache, &k);
		if (!v)
			return;
	}
	if (insert)
		__sync_fetch_and_add(&v->inserted_pages, pages);
	else
		__sync_fetch_and_add(&v->removed_pages, pages);
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
	else
		bpf_map_update_elem(&nio_faults, &k, &one, BPF_NOEXIST);
}

/* ---- fentry / fexit ---- */

SEC("fentry/filemap_read")
int BPF_PROG(nio_fe_rd, struct kiocb *iocb)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_READ);
	return 0;
}

SEC("fexit/filemap_read")
int BPF_PROG(nio_fx_rd, struct kiocb *iocb)
{
	op_exit();
	return 0;
}

SEC("fentry/shmem_file_read_iter")
int BPF_PROG(nio_fe_shrd, struct kiocb *iocb)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_READ);
	return 0;
}

SEC("fexit/shmem_file_read_iter")
int BPF_PROG(nio_fx_shrd, struct kiocb *iocb)
{
	op_exit();
	return 0;
}

SEC("fentry/filemap_splice_read")
int BPF_PROG(nio_fe_splice, struct file *in)
{
	op_enter(in, KIND_READ);
	return 0;
}

SEC("fexit/filemap_splice_read")
int BPF_PROG(nio_fx_splice, struct file *in)
{
	op_exit();
	return 0;
}

SEC("fentry/generic_perform_write")
int BPF_PROG(nio_fe_wr, struct kiocb *iocb)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_WRITE);
	return 0;
}

SEC("fexit/generic_perform_write")
int BPF_PROG(nio_fx_wr, struct kiocb *iocb)
{
	op_exit();
	return 0;
}

SEC("fentry/iomap_file_buffered_write")
int BPF_PROG(nio_fe_iomapwr, struct kiocb *iocb)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_WRITE);
	return 0;
}

SEC("fexit/iomap_file_buffered_write")
int BPF_PROG(nio_fx_iomapwr, struct kiocb *iocb)
{
	op_exit();
	return 0;
}

/* copy_page_to_iter(page, offset, bytes, iter) -> copied */
SEC("fexit/copy_page_to_iter")
int BPF_PROG(nio_fx_cp_rd, struct page *page, size_t offset, size_t bytes, void *iter, size_t ret)
{
	copied(page, (long)ret, KIND_READ);
	return 0;
}

/* splice_folio_into_pipe(pipe, folio, fpos, size) -> spliced */
SEC("fexit/splice_folio_into_pipe")
int BPF_PROG(nio_fx_cp_spl, void *pipe, struct folio *folio, __u64 fpos, size_t size, size_t ret)
{
	copied(folio, (long)ret, KIND_READ);
	return 0;
}

/* copy_page_from_iter_atomic / copy_folio_from_iter_atomic(page, offset, bytes, iter) */
SEC("fexit/copy_page_from_iter_atomic")
int BPF_PROG(nio_fx_cp_wr, struct page *page, size_t offset, size_t bytes, void *iter, size_t ret)
{
	copied(page, (long)ret, KIND_WRITE);
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

/* ---- kprobe / kretprobe: the same, where trampolines are unavailable ---- */

SEC("kprobe/filemap_read")
int BPF_KPROBE(nio_kp_rd, struct kiocb *iocb)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_READ);
	return 0;
}

SEC("kprobe/shmem_file_read_iter")
int BPF_KPROBE(nio_kp_shrd, struct kiocb *iocb)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_READ);
	return 0;
}

SEC("kprobe/filemap_splice_read")
int BPF_KPROBE(nio_kp_splice, struct file *in)
{
	op_enter(in, KIND_READ);
	return 0;
}

SEC("kprobe/generic_perform_write")
int BPF_KPROBE(nio_kp_wr, struct kiocb *iocb)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_WRITE);
	return 0;
}

SEC("kprobe/iomap_file_buffered_write")
int BPF_KPROBE(nio_kp_iomapwr, struct kiocb *iocb)
{
	op_enter(BPF_CORE_READ(iocb, ki_filp), KIND_WRITE);
	return 0;
}

/* One return probe ends any of the operations above. */
SEC("kretprobe/op")
int BPF_KRETPROBE(nio_kr_op)
{
	op_exit();
	return 0;
}

SEC("kprobe/copy_page")
int BPF_KPROBE(nio_kp_cp, void *page)
{
	copy_enter(page);
	return 0;
}

/* splice_folio_into_pipe(pipe, folio, ...): the folio is the second argument. */
SEC("kprobe/splice_folio_into_pipe")
int BPF_KPROBE(nio_kp_cp_spl, void *pipe, void *folio)
{
	copy_enter(folio);
	return 0;
}

SEC("kretprobe/copy_rd")
int BPF_KRETPROBE(nio_kr_cp_rd, long ret)
{
	copy_return(ret, KIND_READ);
	return 0;
}

SEC("kretprobe/copy_wr")
int BPF_KRETPROBE(nio_kr_cp_wr, long ret)
{
	copy_return(ret, KIND_WRITE);
	return 0;
}
