//! Tests of plan files.

use super::npy::*;
use super::verify::*;
use super::write::*;
use crate::error::{Error, Result};
use crate::order::Order;
use crate::plan::Plan;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::*;
use crate::space::Space;
use crate::Kind;

fn plan(n: u64, g: u64, drop_last: bool) -> Plan {
    Plan::new(Order::new(n, 3, 1, Kind::Cipher).unwrap(), g, drop_last, 0).unwrap()
}

#[test]
fn header_is_aligned_and_parses() {
    for count in [0u64, 1, 99, 10u64.pow(10), i64::MAX as u64] {
        let h = npy_header(count);
        assert_eq!(h.len() % ALIGN, 0);
        assert_eq!(*h.last().unwrap(), b'\n');
        let parsed = parse_npy_header(&h).unwrap();
        assert_eq!(parsed.shape, vec![count]);
        assert_eq!(parsed.descr, "<i8");
        assert!(!parsed.fortran_order);
        assert_eq!(parsed.data_offset, h.len() as u64);
    }
}

#[derive(Default)]
struct MemSink(Vec<Vec<u8>>);

impl RankSink for &mut MemSink {
    fn open(&mut self, _: usize) -> Result<()> {
        self.0.push(Vec::new());
        Ok(())
    }
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.0.last_mut().unwrap().extend_from_slice(bytes);
        Ok(())
    }
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

#[test]
fn streamed_files_hold_the_rank_indices() {
    // More than one chunk per rank, and a short last step.
    let (n, g, w) = (3 * CHUNK_IDS as u64 + 17, 1000, 3);
    let p = plan(n, g, false);
    let mut sink = MemSink::default();
    let ranks: Vec<u64> = (0..w).collect();
    let infos = stream_ranks(&p, w, &ranks, &mut sink, &mut |_| true).unwrap();
    for (r, (bytes, info)) in sink.0.iter().zip(&infos).enumerate() {
        let ids = p.rank_indices(r as u64, w).unwrap();
        let header = npy_header(ids.len() as u64);
        assert_eq!(&bytes[..header.len()], &header[..]);
        let data: Vec<i64> = bytes[header.len()..]
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(data, ids);
        assert_eq!(info.bytes, bytes.len() as u64);
        assert_eq!(info.checksum, blake3::hash(bytes).to_hex().to_string());
    }
}

#[test]
fn stopping_is_an_error() {
    let p = plan(1 << 32, 7, false);
    let err = stream_ranks(&p, 1, &[0], NullSink, &mut |_| false);
    assert_eq!(err, Err(interrupted()));
}

/// Opens files slowly and counts them.
struct SlowSink<'a>(&'a AtomicU64);

impl RankSink for SlowSink<'_> {
    fn open(&mut self, _: usize) -> Result<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(1));
        Ok(())
    }
    fn write(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

#[test]
fn empty_files_are_points_where_writing_stops() {
    // 10 samples over 2,000 ranks: all but ten files are empty.
    let p = plan(10, 10, false);
    let ranks: Vec<u64> = (0..2000).collect();
    let opened = AtomicU64::new(0);
    let err = stream_ranks(&p, 2000, &ranks, SlowSink(&opened), &mut |_| false);
    assert_eq!(err, Err(interrupted()));
    let opened = opened.load(Ordering::Relaxed);
    assert!(opened < 2000, "stopped after {opened} of 2000 files");
}

/// A directory of its own under the system's temporary directory,
/// removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("epochplan-core-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes every rank's file of `p` for `w` ranks into `dir`, described
/// as a manifest describes them.
fn written(p: &Plan, w: u64, dir: &Path) -> Vec<ExpectedFile> {
    let ranks: Vec<u64> = (0..w).collect();
    let paths: Vec<PathBuf> = ranks
        .iter()
        .map(|r| dir.join(format!("r{r}.npy")))
        .collect();
    let sink = FileSink::new(paths.clone(), false);
    let infos = write_rank_files(p, w, &ranks, sink, &mut |_| true).unwrap();
    ranks
        .iter()
        .zip(paths)
        .zip(infos)
        .map(|((&rank, path), info)| ExpectedFile {
            path,
            rank,
            count: info.count,
            bytes: info.bytes,
            checksum: info.checksum,
            dtype: FileDtype::I64,
        })
        .collect()
}

fn verify(p: &Plan, w: u64, files: &[ExpectedFile]) -> Result<()> {
    verify_rank_files(
        p.layout(),
        Some(p.order()),
        &Space::Range,
        w,
        files,
        &mut |_| true,
    )
}

#[test]
fn verification_needs_every_rank_once() {
    let dir = TempDir::new("ranks");
    let p = plan(100, 8, false);
    let files = written(&p, 2, &dir.0);
    assert_eq!(verify(&p, 2, &files), Ok(()));
    let err = verify(&p, 2, &files[..1]).unwrap_err().to_string();
    assert!(err.contains("hold 50 ids, its steps hold 100"), "{err}");
    let twice = [files[0].clone(), files[0].clone()];
    assert!(verify(&p, 2, &twice).is_err());
}

#[test]
fn bytes_beyond_the_ids_or_missing_are_refused() {
    let dir = TempDir::new("bytes");
    let p = plan(100, 8, false);
    let files = written(&p, 2, &dir.0);
    // The checksum covers the header and the ids only, so bytes appended
    // with the manifest's size raised to match must fail on the size.
    let mut longer = files.clone();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&longer[0].path)
        .unwrap()
        .write_all(&[0; 8])
        .unwrap();
    longer[0].bytes += 8;
    let err = check_rank_file(&longer[0], &mut |_| true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the manifest says 536 bytes, 50 values of <i8 need 528"),
        "{err}"
    );
    assert!(verify(&p, 2, &longer).is_err());
    // Cut short: the size no longer matches the manifest's.
    let file = File::options().write(true).open(&files[0].path).unwrap();
    file.set_len(files[0].bytes - 8).unwrap();
    let err = check_rank_file(&files[0], &mut |_| true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("truncated or altered"), "{err}");
    assert!(verify(&p, 2, &files).is_err());
}

#[test]
fn io_failures_keep_their_kind_and_name_the_shown_path() {
    let dir = TempDir::new("io");
    let p = plan(100, 8, false);
    let files = written(&p, 2, &dir.0);
    // Written again to the same paths: the files exist.
    let paths: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
    let shown: Vec<PathBuf> = ["/final/r0.npy", "/final/r1.npy"].map(PathBuf::from).into();
    let sink = FileSink::new(paths, false).shown_as(shown).unwrap();
    let err = write_rank_files(&p, 2, &[0, 1], sink, &mut |_| true).unwrap_err();
    assert!(
        matches!(&err, Error::Io { kind: std::io::ErrorKind::AlreadyExists, path, .. }
            if path == Path::new("/final/r0.npy")),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("/final/r0.npy: cannot create: "),
        "{err}"
    );
    std::fs::remove_file(&files[1].path).unwrap();
    let err = verify(&p, 2, &files).unwrap_err();
    assert!(
        matches!(&err, Error::Io { kind: std::io::ErrorKind::NotFound, errno: Some(_), path, .. }
            if *path == files[1].path),
        "{err:?}"
    );
}

#[test]
fn verification_without_the_order_needs_no_left_out_positions() {
    let dir = TempDir::new("layout");
    let p = plan(100, 8, false);
    let files = written(&p, 2, &dir.0);
    assert_eq!(
        verify_rank_files(p.layout(), None, &Space::Range, 2, &files, &mut |_| true),
        Ok(())
    );
    let dropped = plan(100, 8, true);
    let dropped_dir = TempDir::new("layout-dropped");
    let files = written(&dropped, 2, &dropped_dir.0);
    let err = verify_rank_files(
        dropped.layout(),
        None,
        &Space::Range,
        2,
        &files,
        &mut |_| true,
    )
    .unwrap_err();
    assert_eq!(
        err,
        Error::plan_file(
            &dropped_dir.0,
            "checking which ids the steps leave out needs the epoch's order"
        )
    );
}

#[test]
fn plans_over_spaces_verify_against_their_space() {
    use crate::space::{Mixture, Selection};
    use std::sync::Arc;
    let over = |space: Space, len: u64, kind: Kind| {
        Plan::new(Order::new(len, 3, 1, kind).unwrap(), 8, false, 0)
            .unwrap()
            .with_space(space)
            .unwrap()
    };
    let sel = Space::Selection(Arc::new(
        Selection::from_ranges(&[(10, 40), (60, 90)], 100).unwrap(),
    ));
    let p = over(sel.clone(), 60, Kind::Cipher);
    let dir = TempDir::new("space-selection");
    let files = written(&p, 3, &dir.0);
    let check = |order: Option<&Order>, space: &Space, files: &[ExpectedFile]| {
        verify_rank_files(p.layout(), order, space, 3, files, &mut |_| true)
    };
    assert_eq!(check(Some(p.order()), &sel, &files), Ok(()));
    assert_eq!(check(None, &sel, &files), Ok(()));
    // Checked as a plan over 0..60, the files hold other ids.
    assert!(check(Some(p.order()), &Space::Range, &files).is_err());
    // Files of another selection of the same size: not the plan's ids, and
    // without the order, not the selection's.
    let other = Space::Selection(Arc::new(
        Selection::from_ranges(&[(0, 30), (60, 90)], 100).unwrap(),
    ));
    let other_dir = TempDir::new("space-other");
    let wrong = written(&over(other, 60, Kind::Cipher), 3, &other_dir.0);
    let err = check(Some(p.order()), &sel, &wrong).unwrap_err();
    assert!(err.to_string().contains("differs from the plan's"), "{err}");
    let err = check(None, &sel, &wrong).unwrap_err();
    assert!(
        err.to_string().contains("is not in the plan's selection"),
        "{err}"
    );

    // A mixture with a source shown twice: repeated ids are its multiplicities.
    let mixture = Mixture::from_sizes(&[5, 20], 1).unwrap();
    let epoch = Arc::new(mixture.epoch(&[10, 10], &[0, 0]).unwrap());
    let mix = Space::Mixture {
        epoch,
        seed: 3,
        plan_epoch: 1,
    };
    let p = over(mix.clone(), 20, Kind::Identity);
    let dir = TempDir::new("space-mixture");
    let files = written(&p, 2, &dir.0);
    let verify_mix = |space: &Space| {
        verify_rank_files(p.layout(), Some(p.order()), space, 2, &files, &mut |_| true)
    };
    assert_eq!(verify_mix(&mix), Ok(()));
    let reseeded = Space::Mixture {
        epoch: Arc::new(
            Mixture::from_sizes(&[5, 20], 2)
                .unwrap()
                .epoch(&[10, 10], &[0, 0])
                .unwrap(),
        ),
        seed: 3,
        plan_epoch: 1,
    };
    let err = verify_mix(&reseeded).unwrap_err();
    assert!(err.to_string().contains("differs from the plan's"), "{err}");
    let err = verify_rank_files(p.layout(), None, &mix, 2, &files, &mut |_| true).unwrap_err();
    assert!(err.to_string().contains("needs the epoch's order"), "{err}");
}

#[test]
fn file_dtypes_round_trip_their_values_and_refuse_what_they_cannot_hold() {
    let all = [
        (FileDtype::I64, "<i8", 8),
        (FileDtype::I32, "<i4", 4),
        (FileDtype::I16, "<i2", 2),
        (FileDtype::I8, "|i1", 1),
        (FileDtype::U32, "<u4", 4),
        (FileDtype::U16, "<u2", 2),
        (FileDtype::U8, "|u1", 1),
    ];
    for (dtype, descr, size) in all {
        assert_eq!(dtype.descr(), descr);
        assert_eq!(FileDtype::from_descr(descr), Some(dtype));
        assert_eq!(dtype.itemsize(), size);
        let signed = descr.contains('i');
        let bits = 8 * size as u32;
        let (lo, hi) = if signed {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        };
        let candidates = [lo, lo + 1, -1, 0, 1, 200, hi - 1, hi, hi + 1, lo - 1];
        let all: Vec<i64> = candidates
            .iter()
            .filter_map(|&v| i64::try_from(v).ok())
            .collect();
        let (fit, over): (Vec<i64>, Vec<i64>) = all
            .iter()
            .partition(|&&v| (lo..=hi).contains(&i128::from(v)));
        let mut out = vec![7u8];
        dtype.extend(&fit, &mut out).unwrap();
        assert_eq!(out.len(), 1 + size * fit.len());
        let mut back = Vec::new();
        dtype.decode(&out[1..], &mut back);
        assert_eq!(back, fit, "{descr}");
        for v in over {
            assert_eq!(dtype.extend(&[0, v, 1], &mut Vec::new()), Err(v), "{descr}");
        }
        let header = npy_header_of(dtype, 77);
        assert_eq!(header.len(), npy_header(77).len());
        assert_eq!(parse_npy_header(&header).unwrap().descr, descr);
        assert_eq!(
            npy_file_size_of(dtype, 77),
            header.len() as u128 + 77 * size as u128
        );
    }
    assert_eq!(FileDtype::from_descr(">i4"), None);
    assert_eq!(FileDtype::for_source(true, 8), FileDtype::I64);
    assert_eq!(FileDtype::for_source(false, 8), FileDtype::I64);
    assert_eq!(FileDtype::for_source(false, 2), FileDtype::U16);
}
