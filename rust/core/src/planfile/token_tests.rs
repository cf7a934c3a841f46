//! Tests of token plan files: written and verified by the core alone.

use super::*;
use crate::dealing::Dealing;
use crate::order::Order;
use crate::plan::Plan;
use crate::tokens::{Caps, Cost, Normalization};
use crate::{Kind, Layout};
use std::path::{Path, PathBuf};

fn token_plan(n: u64, g: u64) -> Plan {
    let layout = Layout::new(n, g, false, 0)
        .and_then(|l| {
            l.with_dealing(
                Dealing::Balanced { cost: Cost::Tokens },
                Normalization::Tokens,
            )
        })
        .unwrap();
    Plan::from_parts(layout, Order::new(n, 7, 2, Kind::Cipher).unwrap()).unwrap()
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path = std::env::temp_dir().join(format!(
            "epochplan-core-tokens-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    fn paths(&self, w: usize) -> TokenPaths {
        let rank = |role: &str| -> Vec<PathBuf> {
            (0..w)
                .map(|r| self.0.join(format!("rank-{r}.{role}.npy")))
                .collect()
        };
        TokenPaths {
            ranks: (0..w as u64).collect(),
            ids: rank("ids"),
            offsets: rank("offsets"),
            lengths: rank("lengths"),
            loss_tokens: None,
            steps: Some(self.0.join("steps.npy")),
            lengths_dtype: FileDtype::I64,
            loss_tokens_dtype: FileDtype::I64,
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn expected(paths: &[PathBuf], infos: &[FileInfo], dtype: FileDtype) -> Vec<ExpectedFile> {
    paths
        .iter()
        .zip(infos)
        .enumerate()
        .map(|(r, (path, i))| ExpectedFile {
            path: path.clone(),
            rank: r as u64,
            count: i.count,
            bytes: i.bytes,
            checksum: i.checksum.clone(),
            dtype,
        })
        .collect()
}

fn epoch_files(paths: &TokenPaths, files: &TokenFiles) -> TokenEpochFiles {
    TokenEpochFiles {
        ids: expected(&paths.ids, &files.ids, FileDtype::I64),
        offsets: expected(&paths.offsets, &files.offsets, FileDtype::I64),
        lengths: expected(&paths.lengths, &files.lengths, paths.lengths_dtype),
        loss_tokens: None,
        steps: expected(
            std::slice::from_ref(paths.steps.as_ref().unwrap()),
            std::slice::from_ref(files.steps.as_ref().unwrap()),
            FileDtype::I64,
        )
        .remove(0),
    }
}

/// Writes an epoch's files without staging, fsync or progress.
fn write(
    plan: &Plan,
    arrays: TokenArraysRef<'_>,
    world_size: u64,
    caps: Caps,
    paths: &TokenPaths,
) -> crate::Result<TokenFiles> {
    write_token_files(
        plan,
        arrays,
        None,
        world_size,
        caps,
        paths,
        false,
        &mut |_| true,
    )
}

fn values(path: &Path) -> Vec<i64> {
    let bytes = std::fs::read(path).unwrap();
    let header = npy_header(0).len();
    bytes[header..]
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn written_files_hold_every_steps_dealing_and_verify() {
    let (n, g, w) = (5000u64, 64u64, 3usize);
    let lengths: Vec<u32> = (0..n).map(|i| (i * 7919 % 97 + 1) as u32).collect();
    let arrays = TokenArraysRef {
        lengths: &lengths.as_slice(),
        loss_tokens: None,
    };
    let plan = token_plan(n, g);
    let caps = Caps::new(None, Some(300)).unwrap();
    let dir = Dir::new("roundtrip");
    let paths = dir.paths(w);
    let files = write(&plan, arrays, w as u64, caps, &paths).unwrap();
    // Rank by rank, the files are the steps' dealing in order.
    let mut ids = vec![Vec::new(); w];
    let mut offsets = vec![vec![0i64]; w];
    let mut table = Vec::new();
    for step in 0..plan.layout().num_steps() {
        let dealt = deal_token_step(&plan, arrays, w as u64, caps, step).unwrap();
        table.extend(dealt.row);
        for r in 0..w {
            ids[r].extend_from_slice(dealt.of(&dealt.ids, r));
            offsets[r].push(ids[r].len() as i64);
        }
    }
    for r in 0..w {
        assert_eq!(values(&paths.ids[r]), ids[r]);
        assert_eq!(values(&paths.offsets[r]), offsets[r]);
        let want: Vec<i64> = ids[r]
            .iter()
            .map(|&i| i64::from(lengths[i as usize]))
            .collect();
        assert_eq!(values(&paths.lengths[r]), want);
        assert_eq!(files.ids[r].checksum, file_checksum(&paths.ids[r]).unwrap());
    }
    assert_eq!(values(paths.steps.as_ref().unwrap()), table);
    let check = TokenCheck {
        plan: &plan,
        world_size: w as u64,
        caps,
        cost: Cost::Tokens,
        dir: &dir.0,
        epoch: 2,
    };
    let listed = epoch_files(&paths, &files);
    let found = verify_token_files(check, &listed, Some(arrays), &mut |_| true).unwrap();
    assert!(found.is_none());
    // Other lengths: the stored ones differ from them.
    let other: Vec<u32> = lengths.iter().map(|&l| l + 1).collect();
    let other = TokenArraysRef {
        lengths: &other.as_slice(),
        loss_tokens: None,
    };
    // Returned, not raised: the caller checks the arrays' digests first.
    let found = verify_token_files(check, &listed, Some(other), &mut |_| true).unwrap();
    let err = found.expect("the stored lengths differ from the file's");
    assert!(err.to_string().contains("the lengths file has"), "{err}");
    // A part's ranks alone (rank 1 and 2, no step table): the same bytes.
    let part_dir = Dir::new("roundtrip-part");
    let mut part = part_dir.paths(w);
    part.ranks = vec![1, 2];
    for role in [&mut part.ids, &mut part.offsets, &mut part.lengths] {
        role.remove(0);
    }
    part.steps = None;
    let written = write(&plan, arrays, w as u64, caps, &part).unwrap();
    assert!(written.steps.is_none());
    assert_eq!(written.ids, files.ids[1..]);
    assert_eq!(written.offsets, files.offsets[1..]);
    assert_eq!(written.lengths, files.lengths[1..]);
    part.ranks = vec![2, 1];
    assert!(write(&plan, arrays, w as u64, caps, &part).is_err());
}

#[test]
fn a_sample_over_the_cap_is_the_error_of_the_first_step_holding_one() {
    // Steps are dealt in parallel: the error is still the first step's.
    let (n, g) = (40_000u64, 50u64);
    let plan = token_plan(n, g);
    let mut lengths = vec![1u16; n as usize];
    let late: Vec<i64> = (700..plan.layout().num_steps())
        .step_by(37)
        .map(|t| plan.step_ids(t).unwrap()[0])
        .collect();
    for &id in &late {
        lengths[id as usize] = 100;
    }
    let arrays = TokenArraysRef {
        lengths: &lengths.as_slice(),
        loss_tokens: None,
    };
    let dir = Dir::new("oversize");
    let caps = Caps::new(None, Some(50)).unwrap();
    let err = write(&plan, arrays, 4, caps, &dir.paths(4)).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("lengths[{}] must be <= max_tokens", late[0]))
            && err.to_string().contains("step 700 fits"),
        "{err}"
    );
}

#[test]
fn narrow_lengths_files_hold_the_same_values_and_verify() {
    let (n, g, w) = (3000u64, 48u64, 3usize);
    let lengths: Vec<u16> = (0..n).map(|i| (i * 7919 % 251 + 1) as u16).collect();
    let arrays = TokenArraysRef {
        lengths: &lengths.as_slice(),
        loss_tokens: None,
    };
    let plan = token_plan(n, g);
    let caps = Caps::new(None, Some(600)).unwrap();
    let wide_dir = Dir::new("narrow-wide");
    let wide = wide_dir.paths(w);
    let wide_files = write(&plan, arrays, w as u64, caps, &wide).unwrap();
    let dir = Dir::new("narrow");
    let mut paths = dir.paths(w);
    paths.lengths_dtype = FileDtype::U16;
    let files = write(&plan, arrays, w as u64, caps, &paths).unwrap();
    assert_eq!(files.ids, wide_files.ids);
    assert_eq!(files.offsets, wide_files.offsets);
    for r in 0..w {
        let bytes = std::fs::read(&paths.lengths[r]).unwrap();
        let header = parse_npy_header(&bytes).unwrap();
        assert_eq!(header.descr, "<u2");
        let mut stored = Vec::new();
        FileDtype::U16.decode(&bytes[header.data_offset as usize..], &mut stored);
        assert_eq!(stored, values(&wide.lengths[r]));
        assert_eq!(files.lengths[r].bytes, bytes.len() as u64);
    }
    let check = TokenCheck {
        plan: &plan,
        world_size: w as u64,
        caps,
        cost: Cost::Tokens,
        dir: &dir.0,
        epoch: 2,
    };
    let listed = epoch_files(&paths, &files);
    for given in [Some(arrays), None] {
        let found = verify_token_files(check, &listed, given, &mut |_| true).unwrap();
        assert!(found.is_none());
    }
    // Listed as int16 (the same size): the header says otherwise.
    let mut wrong = listed.clone();
    for f in &mut wrong.lengths {
        f.dtype = FileDtype::I16;
    }
    let err = verify_token_files(check, &wrong, None, &mut |_| true).unwrap_err();
    assert!(
        err.to_string().contains("has dtype '<u2', expected '<i2'"),
        "{err}"
    );
}

#[test]
fn staged_arrays_write_and_verify_the_same_files() {
    // Lengths staged by position (what a memory-mapped file is read
    // through) give every file byte for byte, loss tokens included.
    let (n, g, w) = (7000u64, 96u64, 3usize);
    let lengths: Vec<u32> = (0..n).map(|i| (i * 7919 % 97 + 2) as u32).collect();
    let loss: Vec<u16> = lengths.iter().map(|&l| (l - 1) as u16).collect();
    let arrays = TokenArraysRef {
        lengths: &lengths.as_slice(),
        loss_tokens: Some(&loss.as_slice()),
    };
    let plan = token_plan(n, g);
    let caps = Caps::new(None, Some(400)).unwrap();
    let with_loss = |dir: &Dir| {
        let mut paths = dir.paths(w);
        paths.loss_tokens = Some(
            (0..w)
                .map(|r| dir.0.join(format!("loss-{r}.npy")))
                .collect(),
        );
        paths
    };
    let direct_dir = Dir::new("staged-direct");
    let direct = with_loss(&direct_dir);
    let want = write(&plan, arrays, w as u64, caps, &direct).unwrap();
    let staged = StagedArrays::new(&plan, arrays, &std::env::temp_dir())
        .unwrap()
        .unwrap();
    let dir = Dir::new("staged");
    let paths = with_loss(&dir);
    let got = write_token_files(
        &plan,
        arrays,
        Some(&staged),
        w as u64,
        caps,
        &paths,
        false,
        &mut |_| true,
    )
    .unwrap();
    assert_eq!(got.ids, want.ids);
    assert_eq!(got.offsets, want.offsets);
    assert_eq!(got.lengths, want.lengths);
    assert_eq!(got.loss_tokens, want.loss_tokens);
    assert_eq!(got.steps, want.steps);
    let check = TokenCheck {
        plan: &plan,
        world_size: w as u64,
        caps,
        cost: Cost::Tokens,
        dir: &dir.0,
        epoch: 0,
    };
    let mut listed = epoch_files(&paths, &got);
    listed.loss_tokens = Some(expected(
        paths.loss_tokens.as_ref().unwrap(),
        got.loss_tokens.as_ref().unwrap(),
        paths.loss_tokens_dtype,
    ));
    let found = verify_token_files(check, &listed, Some(arrays), &mut |_| true).unwrap();
    assert!(found.is_none());
    // Other loss tokens, staged: the stored ones are named as differing.
    let other: Vec<u16> = loss.iter().map(|&l| l.saturating_sub(1)).collect();
    let other = TokenArraysRef {
        lengths: &lengths.as_slice(),
        loss_tokens: Some(&other.as_slice()),
    };
    let found = verify_token_files(check, &listed, Some(other), &mut |_| true).unwrap();
    let err = found.expect("the stored loss tokens differ from the file's");
    assert!(
        err.to_string().contains("the loss_tokens file has"),
        "{err}"
    );
}
