/* The few kernel types the collector reads, for CO-RE: field offsets are relocated against
 * the running kernel's BTF at load time, so no kernel headers are needed anywhere. */
#ifndef NUMAIO_KERNEL_H
#define NUMAIO_KERNEL_H

/* bpf_tracing.h names the kernel's pt_regs fields (di, si, ...) when this is defined. */
#define __VMLINUX_H__ 1

typedef unsigned char __u8;
typedef short int __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0
typedef __u32 dev_t;
typedef unsigned long size_t;

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_F_NO_PREALLOC = 1,
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di;
	unsigned long orig_ax, ip, cs, flags, sp, ss;
};

struct super_block {
	dev_t s_dev;
};

/* CONFIG_TASK_XACCT: the read and write system calls a task made. */
struct task_io_accounting {
	__u64 syscr;
	__u64 syscw;
};

struct task_struct {
	struct task_io_accounting ioac;
};

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
};

struct file {
	struct inode *f_inode;
};

struct kiocb {
	struct file *ki_filp;
	long long ki_pos;
};

struct iov_iter {
	size_t count;
};

struct address_space {
	struct inode *host;
};

/* page->flags (a word, or a one-word struct since 6.18) is the first member of struct page
 * and of struct folio on every kernel: read as a word at offset 0. */
struct page {
	struct address_space *mapping;
};

struct folio {
	struct address_space *mapping;
	unsigned long index;
};

struct folio_batch {
	unsigned char nr;
	struct folio *folios[15];
};

/* Large folios: the page count lives in _folio_nr_pages (6.1 .. 6.x) or _nr_pages (later). */
struct folio___nr_old {
	unsigned int _folio_nr_pages;
};
struct folio___nr_new {
	unsigned int _nr_pages;
};

struct vm_fault {
	struct vm_area_struct *vma;
	struct page *page;
};

struct vm_area_struct {
	struct file *vm_file;
};

#pragma clang attribute pop

/* Only the names matter: their values are relocated from the running kernel. */
enum pageflags {
	PG_head = 0,
};

/* Its size is MAX_NUMNODES bits: the width of the node field in page->flags. */
typedef struct {
	unsigned long bits[1];
} nodemask_t;

#endif
