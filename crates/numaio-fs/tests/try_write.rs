//! `Fs::try_write` writes exactly what `Fs::write` would where nothing makes it wait, and
//! otherwise does nothing at all: not for a partly covered block it would have to read from
//! its device first, not while another write holds the file, not while a commit is due, not
//! out of space.

use numaio_fs::store::MemStore;
use numaio_fs::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

mod hooked;
use hooked::Hooked;

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;
const BS: usize = BLOCK_SIZE as usize;

fn opts() -> MkfsOptions {
    MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 64,
        journal_blocks: 32,
        checkpoint_blocks: 64,
    }
}

fn root() -> Caller {
    Caller::root_on(0)
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), size);
    buf
}

#[test]
fn whole_blocks_are_written_and_partial_ones_left_to_a_waiting_write() {
    let mem = Arc::new(MemStore::new(&[(0, 4 * MIB), (1, 4 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    // Hooked leaves `read_cached` at its default: every read might wait.
    let fs = Fs::mount(Arc::new(Hooked::new(mem)), MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;

    assert_eq!(
        fs.try_write(f, 0, &vec![1u8; 2 * BS], &root()).unwrap(),
        Some(2 * BS)
    );
    // Into a hole past the end: the gap reads as zeros, as after a write.
    assert_eq!(
        fs.try_write(f, 4 * BS as u64, &vec![2u8; BS], &root())
            .unwrap(),
        Some(BS)
    );
    let mut want = vec![1u8; 2 * BS];
    want.resize(4 * BS, 0);
    want.resize(5 * BS, 2);
    assert_eq!(read_all(&fs, f), want);
    let a = fs.getattr(f).unwrap();
    assert_eq!(a.size, 5 * BS as u64);

    // Part of a block, at either end: nothing happens, not even the times change.
    for (off, len) in [(1, BS), (0, BS - 1), (BS as u64, 10), (7, 3 * BS + 5)] {
        assert_eq!(
            fs.try_write(f, off, &vec![9u8; len], &root()).unwrap(),
            None,
            "{len} bytes at {off}"
        );
    }
    assert_eq!(read_all(&fs, f), want);
    assert_eq!(fs.getattr(f).unwrap(), a);

    // Errors are those of a write.
    let d = fs.mkdir(ROOT, b"d", 0o755, &root()).unwrap().ino;
    assert!(matches!(
        fs.try_write(d, 0, &vec![0u8; BS], &root()),
        Err(FsError::IsDir)
    ));
    assert!(matches!(
        fs.try_write(f, MAX_FILE_SIZE, &vec![0u8; BS], &root()),
        Err(FsError::TooBig)
    ));
    fs.sync().unwrap();
    drop(fs);
}

#[test]
fn a_write_in_progress_on_the_file_makes_it_wait_but_not_on_other_files() {
    let mem = Arc::new(MemStore::new(&[(0, 4 * MIB), (1, 4 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    // Device writes of the byte 0xAB stop until released.
    let hold = Arc::new(AtomicBool::new(true));
    let (entered_tx, entered) = mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let h = hold.clone();
    let store = Hooked::new(mem).on_write(move |_, _, data| {
        if data.first() == Some(&0xAB) {
            let _ = entered_tx.lock().unwrap().send(());
            while h.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    });
    let fs = Arc::new(Fs::mount(Arc::new(store), MountOptions::default()).unwrap());
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
    let g = fs.create(ROOT, b"g", 0o644, &root()).unwrap().ino;

    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.write(f, 0, &vec![0xABu8; BS], &root()).unwrap())
    };
    entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the held write reaches its device");
    // The same file is being written: nothing is done.
    assert_eq!(fs.try_write(f, 0, &vec![1u8; BS], &root()).unwrap(), None);
    assert_eq!(
        fs.try_write(f, BS as u64, &vec![1u8; BS], &root()).unwrap(),
        None
    );
    // Another file is not held up by it.
    assert_eq!(
        fs.try_write(g, 0, &vec![3u8; BS], &root()).unwrap(),
        Some(BS)
    );
    hold.store(false, Ordering::SeqCst);
    assert_eq!(writer.join().unwrap(), BS);
    assert_eq!(read_all(&fs, f), vec![0xABu8; BS]);
    assert_eq!(read_all(&fs, g), vec![3u8; BS]);
    assert_eq!(
        fs.try_write(f, 0, &vec![1u8; BS], &root()).unwrap(),
        Some(BS)
    );
    assert_eq!(read_all(&fs, f), vec![1u8; BS]);
}

#[test]
fn out_of_space_or_read_only_it_does_nothing_or_fails_as_a_write() {
    let mem = Arc::new(MemStore::new(&[(0, MIB), (1, MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    let fs = Fs::mount(mem.clone(), MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
    let free = fs.statfs().free_blocks as usize;
    let big = vec![5u8; (free + 1) * BS];
    assert_eq!(fs.try_write(f, 0, &big, &root()).unwrap(), None);
    assert_eq!(fs.getattr(f).unwrap().size, 0);
    assert_eq!(fs.statfs().free_blocks as usize, free);
    assert!(matches!(
        fs.write(f, 0, &big, &root()),
        Err(FsError::NoSpace)
    ));
    fs.sync().unwrap();
    drop(fs);

    let ro = Fs::mount(
        mem,
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    )
    .unwrap();
    assert!(matches!(
        ro.try_write(f, 0, &vec![0u8; BS], &root()),
        Err(FsError::ReadOnly)
    ));
}

#[test]
fn parts_of_blocks_in_memory_are_written_without_waiting() {
    let mem = Arc::new(MemStore::new(&[(0, 4 * MIB), (1, 4 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    let fs = Fs::mount(mem.clone(), MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
    let mut want = Vec::new();
    // Appends of a WAL frame's size, an overwrite inside one block, one across a boundary,
    // and one past the end that leaves a hole.
    let writes: [(u64, usize); 6] = [
        (0, 4120),
        (4120, 4120),
        (8240, 4120),
        (100, 10),
        (4000, 300),
        (20_000, 5),
    ];
    for (i, (off, len)) in writes.into_iter().enumerate() {
        let data = vec![i as u8 + 1; len];
        assert_eq!(
            fs.try_write(f, off, &data, &root()).unwrap(),
            Some(len),
            "{len} bytes at {off}"
        );
        let end = off as usize + len;
        if want.len() < end {
            want.resize(end, 0);
        }
        want[off as usize..end].copy_from_slice(&data);
    }
    assert_eq!(read_all(&fs, f), want);
    fs.unmount().unwrap();
    let fs = Fs::mount(mem, MountOptions::default()).unwrap();
    assert_eq!(read_all(&fs, f), want);
}

/// The same random writes, tried first on a store whose reads never wait and written on one
/// whose reads might: the files read the same, and as a model of the writes says.
#[test]
fn tried_and_waiting_partial_writes_give_the_same_file() {
    let mut rng = fastrand::Rng::with_seed(23);
    let stores = [
        Arc::new(MemStore::new(&[(0, 4 * MIB), (1, 4 * MIB)])),
        Arc::new(MemStore::new(&[(0, 4 * MIB), (1, 4 * MIB)])),
    ];
    let mut vols = Vec::new();
    for (k, mem) in stores.iter().enumerate() {
        Fs::mkfs(&**mem, &opts()).unwrap();
        let store: Arc<dyn numaio_fs::store::BlockStore> = if k == 0 {
            mem.clone()
        } else {
            Arc::new(Hooked::new(mem.clone()))
        };
        let fs = Fs::mount(store, MountOptions::default()).unwrap();
        let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
        vols.push((fs, f));
    }
    let mut want: Vec<u8> = Vec::new();
    for round in 0..300u32 {
        let off = rng.u64(0..96 * 1024);
        let len = rng.usize(1..3 * BS);
        let data: Vec<u8> = (0..len).map(|_| rng.u8(1..)).collect();
        // Where the store's reads might wait, only writes whose partly covered blocks are
        // new get through without waiting.
        for (fs, f) in &vols {
            match fs.try_write(*f, off, &data, &root()).unwrap() {
                Some(n) => assert_eq!(n, len),
                None => assert_eq!(fs.write(*f, off, &data, &root()).unwrap(), len),
            }
        }
        let end = off as usize + len;
        if want.len() < end {
            want.resize(end, 0);
        }
        want[off as usize..end].copy_from_slice(&data);
        if round % 50 == 49 {
            for (fs, f) in &vols {
                fs.sync().unwrap();
                assert_eq!(read_all(fs, *f), want, "after {round} writes");
            }
        }
    }
    for (fs, f) in &vols {
        assert_eq!(read_all(fs, *f), want);
    }
}
