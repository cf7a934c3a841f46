//! The `.npy` header of a rank file: written, sized and parsed.

pub(super) const MAGIC: &[u8; 6] = b"\x93NUMPY";
pub(super) const ALIGN: usize = 64;

/// The integer type of a plan file's values: int64 for ids, offsets and
/// step tables; a token plan's lengths and loss tokens keep their source's
/// type when it has at most 32 bits (an int32 lengths file of 10^9 samples
/// stores 4 GB of lengths, not 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileDtype {
    /// `<i8`.
    #[default]
    I64,
    /// `<i4`.
    I32,
    /// `<i2`.
    I16,
    /// `|i1`.
    I8,
    /// `<u4`.
    U32,
    /// `<u2`.
    U16,
    /// `|u1`.
    U8,
}

impl FileDtype {
    const ALL: [FileDtype; 7] = [
        FileDtype::I64,
        FileDtype::I32,
        FileDtype::I16,
        FileDtype::I8,
        FileDtype::U32,
        FileDtype::U16,
        FileDtype::U8,
    ];

    /// Its numpy descriptor (little-endian), as a `.npy` header and a
    /// manifest spell it.
    pub fn descr(self) -> &'static str {
        match self {
            FileDtype::I64 => "<i8",
            FileDtype::I32 => "<i4",
            FileDtype::I16 => "<i2",
            FileDtype::I8 => "|i1",
            FileDtype::U32 => "<u4",
            FileDtype::U16 => "<u2",
            FileDtype::U8 => "|u1",
        }
    }

    /// The type a descriptor names, if a plan file may hold it.
    pub fn from_descr(descr: &str) -> Option<FileDtype> {
        Self::ALL.into_iter().find(|d| d.descr() == descr)
    }

    /// The type stored for a source of integers of `itemsize` bytes, signed
    /// or not: its own up to 32 bits, int64 above.
    pub fn for_source(signed: bool, itemsize: usize) -> FileDtype {
        match (signed, itemsize) {
            (true, 1) => FileDtype::I8,
            (true, 2) => FileDtype::I16,
            (true, 4) => FileDtype::I32,
            (false, 1) => FileDtype::U8,
            (false, 2) => FileDtype::U16,
            (false, 4) => FileDtype::U32,
            _ => FileDtype::I64,
        }
    }

    /// Bytes per value.
    pub fn itemsize(self) -> usize {
        match self {
            FileDtype::I64 => 8,
            FileDtype::I32 | FileDtype::U32 => 4,
            FileDtype::I16 | FileDtype::U16 => 2,
            FileDtype::I8 | FileDtype::U8 => 1,
        }
    }

    /// Appends `values` in little-endian; the first value the type cannot
    /// hold is the error (`out` then holds a part of them).
    pub fn extend(self, values: &[i64], out: &mut Vec<u8>) -> std::result::Result<(), i64> {
        // One loop per type, the type chosen once.
        macro_rules! put {
            ($t:ty) => {{
                const SIZE: usize = std::mem::size_of::<$t>();
                let start = out.len();
                out.resize(start + SIZE * values.len(), 0);
                for (&v, slot) in values.iter().zip(out[start..].chunks_exact_mut(SIZE)) {
                    slot.copy_from_slice(&<$t>::try_from(v).map_err(|_| v)?.to_le_bytes());
                }
                Ok(())
            }};
        }
        match self {
            FileDtype::I64 => put!(i64),
            FileDtype::I32 => put!(i32),
            FileDtype::I16 => put!(i16),
            FileDtype::I8 => put!(i8),
            FileDtype::U32 => put!(u32),
            FileDtype::U16 => put!(u16),
            FileDtype::U8 => put!(u8),
        }
    }

    /// Appends the values of `bytes` (whole values, little-endian) to `out`.
    pub fn decode(self, bytes: &[u8], out: &mut Vec<i64>) {
        macro_rules! get {
            ($t:ty) => {{
                const SIZE: usize = std::mem::size_of::<$t>();
                out.extend(bytes.chunks_exact(SIZE).map(|b| {
                    let mut le = [0u8; SIZE];
                    le.copy_from_slice(b);
                    i64::from(<$t>::from_le_bytes(le))
                }))
            }};
        }
        match self {
            FileDtype::I64 => get!(i64),
            FileDtype::I32 => get!(i32),
            FileDtype::I16 => get!(i16),
            FileDtype::I8 => get!(i8),
            FileDtype::U32 => get!(u32),
            FileDtype::U16 => get!(u16),
            FileDtype::U8 => get!(u8),
        }
    }
}

/// The `.npy` (v1.0) header of a 1-d little-endian int64 array of `count` ids.
pub fn npy_header(count: u64) -> Vec<u8> {
    npy_header_of(FileDtype::I64, count)
}

/// The `.npy` (v1.0) header of a 1-d array of `count` values of `dtype`
/// (the same length for every dtype: their descriptors have 3 characters).
pub fn npy_header_of(dtype: FileDtype, count: u64) -> Vec<u8> {
    let descr = dtype.descr();
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({count},), }}");
    let total = (MAGIC.len() + 4 + dict.len() + 1).div_ceil(ALIGN) * ALIGN;
    let mut header = Vec::with_capacity(total);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&[1, 0]);
    // A 1-d dict is < 100 bytes: the length always fits the v1.0 u16 field.
    header.extend_from_slice(&((total - 10) as u16).to_le_bytes());
    header.extend_from_slice(dict.as_bytes());
    header.resize(total - 1, b' ');
    header.push(b'\n');
    header
}

/// The file size of a plan file of `count` ids, header included (in 128
/// bits: for the largest counts it exceeds any file system's limit).
pub fn npy_file_size(count: u64) -> u128 {
    npy_file_size_of(FileDtype::I64, count)
}

/// The file size of a plan file of `count` values of `dtype`, header included.
pub fn npy_file_size_of(dtype: FileDtype, count: u64) -> u128 {
    npy_header_of(dtype, count).len() as u128 + u128::from(count) * dtype.itemsize() as u128
}

/// What a `.npy` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Where the data starts.
    pub data_offset: u64,
    /// The dtype descriptor, e.g. `<i8`.
    pub descr: String,
    /// Whether the data is in Fortran order.
    pub fortran_order: bool,
    /// The shape.
    pub shape: Vec<u64>,
}

fn dict_value<'a>(dict: &'a str, key: &str) -> Option<&'a str> {
    let at = dict.find(&format!("'{key}':"))? + key.len() + 3;
    Some(dict[at..].trim_start())
}

/// Parses the header of a `.npy` file from its first bytes (at least the
/// whole header). Errors describe what is wrong, for a violation message.
pub fn parse_npy_header(bytes: &[u8]) -> std::result::Result<NpyHeader, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("is not an .npy file (no \\x93NUMPY magic)".into());
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("has an unsupported .npy version {v}")),
    };
    let end = start + len;
    let text = bytes.get(start..end).ok_or("has a truncated .npy header")?;
    let dict = std::str::from_utf8(text).map_err(|_| "has a .npy header that is not text")?;
    let descr = dict_value(dict, "descr")
        .and_then(|v| v.strip_prefix('\''))
        .and_then(|v| v.split('\'').next())
        .ok_or("has a .npy header without 'descr'")?;
    let fortran_order = match dict_value(dict, "fortran_order") {
        Some(v) if v.starts_with("False") => false,
        Some(v) if v.starts_with("True") => true,
        _ => return Err("has a .npy header without 'fortran_order'".into()),
    };
    let shape = dict_value(dict, "shape")
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.split(')').next())
        .ok_or("has a .npy header without 'shape'")?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>())
        .collect::<std::result::Result<Vec<u64>, _>>()
        .map_err(|_| format!("has a .npy header with a bad shape ({shape})"))?;
    Ok(NpyHeader {
        data_offset: end as u64,
        descr: descr.to_string(),
        fortran_order,
        shape,
    })
}
