//! The `.npy` header of a rank file: written, sized and parsed.

pub(super) const MAGIC: &[u8; 6] = b"\x93NUMPY";
pub(super) const ALIGN: usize = 64;

/// The `.npy` (v1.0) header of a 1-d little-endian int64 array of `count` ids.
pub fn npy_header(count: u64) -> Vec<u8> {
    let dict = format!("{{'descr': '<i8', 'fortran_order': False, 'shape': ({count},), }}");
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
    npy_header(count).len() as u128 + u128::from(count) * 8
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
