//! The lab's two guest kernels: Debian 12's 6.1 and Debian's 7.3 (trixie-backports). Each
//! boots a 2-node guest with one NVMe disk per node; the disks show their node in sysfs,
//! `/dev/fuse` is there (insmod of `fuse.ko` on 6.1, built in on 7.3, both through
//! `Scenario::fuse`), and 7.3 has FUSE over io_uring (`enable_uring`, writable).
//!
//! Needs the release binaries and both kernels in the lab cache (`scripts/setup.sh`); see
//! lab/README.md.

use numaio_lab::{GuestKernel, LabTopology, Scenario};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

const SCRIPT: &str = r#"
echo "@@begin uname"; uname -r
echo "@@begin nodes"; ls -d /sys/devices/system/node/node[0-9]* | wc -l
echo "@@begin disks"
for b in /sys/block/nvme*n*; do echo "$(cat $b/device/numa_node) $(echo $(cat $b/device/serial))"; done | sort
echo "@@begin fuse"
[ -c /dev/fuse ] && echo "dev=yes" || echo "dev=no"
grep -q '^fuse ' /proc/modules && echo "loaded=module" || echo "loaded=builtin"
if [ -e /sys/module/fuse/parameters/enable_uring ]; then
  echo Y > /sys/module/fuse/parameters/enable_uring && echo "uring=$(cat /sys/module/fuse/parameters/enable_uring)"
else
  echo "uring=absent"
fi
"#;

/// Boots `k` on 2 nodes (one CPU, one 16 MiB NVMe disk each) and returns the sections.
fn boot(k: GuestKernel) -> numaio_lab::Outcome {
    let t = Instant::now();
    let out = Scenario::new(LabTopology::from_nodes(&[(1, 256), (1, 256)]), SCRIPT)
        .kernel(k)
        .fuse()
        .node_disk(0, 16 * MIB)
        .node_disk(1, 16 * MIB)
        .timeout(Duration::from_secs(180))
        .must_run();
    eprintln!(
        "{k} guest: boot {:.1} s, whole run {:.1} s",
        out.boot_time.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(out.exit_code, 0, "{}", out.report());
    assert!(
        out.section("uname")
            .trim()
            .starts_with(&format!("{}.", k.label())),
        "{k} asked for, the guest runs {}\n{}",
        out.section("uname").trim(),
        out.report()
    );
    assert_eq!(out.section("nodes").trim(), "2", "{}", out.report());
    // serials are node<QEMU node>-<k>; both nodes have a CPU, so guest ids equal QEMU ids
    let disks: Vec<&str> = out.section("disks").lines().collect();
    assert_eq!(
        disks,
        ["0 node0-0", "1 node1-0"],
        "each NVMe disk on its node\n{}",
        out.report()
    );
    assert!(out.section("fuse").contains("dev=yes"), "{}", out.report());
    out
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn debian73_two_nodes_nvme_on_its_node_fuse_built_in_with_io_uring() {
    let out = boot(GuestKernel::Debian73);
    let fuse = out.section("fuse");
    assert!(fuse.contains("loaded=builtin"), "{}", out.report());
    assert!(
        fuse.contains("uring=Y"),
        "7.3 has FUSE over io_uring, enabled through its parameter\n{}",
        out.report()
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn debian61_two_nodes_nvme_on_its_node_fuse_as_a_module() {
    let out = boot(GuestKernel::Debian61);
    let fuse = out.section("fuse");
    assert!(fuse.contains("loaded=module"), "{}", out.report());
    assert!(
        fuse.contains("uring=absent"),
        "6.1 predates FUSE over io_uring\n{}",
        out.report()
    );
}

#[test]
fn kernel_choices_parse() {
    assert_eq!(GuestKernel::parse("7.3"), Some(GuestKernel::Debian73));
    assert_eq!(GuestKernel::parse(" 6.1\n"), Some(GuestKernel::Debian61));
    assert_eq!(GuestKernel::parse("/boot/vmlinuz"), None);
    assert!(GuestKernel::Debian73.matches_version("7.3.4+deb13-cloud-amd64"));
    assert!(!GuestKernel::Debian73.matches_version("7.30.1"));
    assert!(!GuestKernel::Debian61.matches_version("7.3.4+deb13-cloud-amd64"));
}
