//! The per-file checksums of `backup_manifest` (`Checksum-Algorithm`): CRC-32C, SHA-224,
//! SHA-256, SHA-384, SHA-512, or none. A [`FileDigest`] is fed the file's bytes in order, in
//! whatever pieces the reader has them, so that the checksum costs no read of its own.

use sha2::Digest;

/// A `Checksum-Algorithm` this reader does not know (its text as written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown Checksum-Algorithm \"{0}\"")]
pub struct UnknownAlgorithm(pub String);

/// A manifest's `Checksum-Algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    None,
    Crc32c,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl Algorithm {
    /// The algorithm of a manifest entry's `Checksum-Algorithm` text (absent means none).
    pub fn from_manifest(name: Option<&str>) -> Result<Algorithm, UnknownAlgorithm> {
        Ok(match name {
            None | Some("NONE") => Algorithm::None,
            Some("CRC32C") => Algorithm::Crc32c,
            Some("SHA224") => Algorithm::Sha224,
            Some("SHA256") => Algorithm::Sha256,
            Some("SHA384") => Algorithm::Sha384,
            Some("SHA512") => Algorithm::Sha512,
            Some(other) => return Err(UnknownAlgorithm(other.to_string())),
        })
    }

    /// The name the manifest uses.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::None => "NONE",
            Algorithm::Crc32c => "CRC32C",
            Algorithm::Sha224 => "SHA224",
            Algorithm::Sha256 => "SHA256",
            Algorithm::Sha384 => "SHA384",
            Algorithm::Sha512 => "SHA512",
        }
    }
}

/// A checksum being computed.
#[derive(Clone)]
pub enum FileDigest {
    None,
    Crc32c(u32),
    Sha224(sha2::Sha224),
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

impl FileDigest {
    pub fn new(algorithm: Algorithm) -> FileDigest {
        match algorithm {
            Algorithm::None => FileDigest::None,
            Algorithm::Crc32c => FileDigest::Crc32c(0),
            Algorithm::Sha224 => FileDigest::Sha224(sha2::Sha224::new()),
            Algorithm::Sha256 => FileDigest::Sha256(sha2::Sha256::new()),
            Algorithm::Sha384 => FileDigest::Sha384(sha2::Sha384::new()),
            Algorithm::Sha512 => FileDigest::Sha512(sha2::Sha512::new()),
        }
    }

    /// Adds the next bytes of the file.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            FileDigest::None => {}
            FileDigest::Crc32c(crc) => *crc = crc32c::crc32c_append(*crc, bytes),
            FileDigest::Sha224(h) => h.update(bytes),
            FileDigest::Sha256(h) => h.update(bytes),
            FileDigest::Sha384(h) => h.update(bytes),
            FileDigest::Sha512(h) => h.update(bytes),
        }
    }

    /// The checksum in the manifest's hexadecimal form; `None` for no algorithm. The server
    /// writes a finished CRC-32C's four bytes in memory (little-endian) order.
    pub fn finish_hex(self) -> Option<String> {
        match self {
            FileDigest::None => None,
            FileDigest::Crc32c(crc) => Some(hex(&crc.to_le_bytes())),
            FileDigest::Sha224(h) => Some(hex(&h.finalize())),
            FileDigest::Sha256(h) => Some(hex(&h.finalize())),
            FileDigest::Sha384(h) => Some(hex(&h.finalize())),
            FileDigest::Sha512(h) => Some(hex(&h.finalize())),
        }
    }
}

/// The SHA-256 of `data`, in hexadecimal: the manifest's checksum over its own text.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&sha2::Sha256::digest(data))
}

/// Lower-case hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(a: Algorithm, pieces: &[&[u8]]) -> Option<String> {
        let mut d = FileDigest::new(a);
        for p in pieces {
            d.update(p);
        }
        d.finish_hex()
    }

    #[test]
    fn known_answers_in_any_pieces() {
        // FIPS 180-4 examples ("abc") and the CRC-32C check value of "123456789" (0xE3069283,
        // written little-endian).
        assert_eq!(
            digest(Algorithm::Sha256, &[b"a", b"bc"]).as_deref(),
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        assert_eq!(
            digest(Algorithm::Sha224, &[b"abc"]).as_deref(),
            Some("23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7")
        );
        assert_eq!(
            digest(Algorithm::Sha384, &[b"ab", b"c"]).map(|h| h[..16].to_string()),
            Some("cb00753f45a35e8b".to_string())
        );
        assert_eq!(
            digest(Algorithm::Sha512, &[b"abc"]).map(|h| h[..16].to_string()),
            Some("ddaf35a193617aba".to_string())
        );
        assert_eq!(
            digest(Algorithm::Crc32c, &[b"1234", b"56789"]).as_deref(),
            Some("839206e3")
        );
        assert_eq!(digest(Algorithm::None, &[b"x"]), None);
        assert_eq!(
            Algorithm::from_manifest(Some("SHA384")),
            Ok(Algorithm::Sha384)
        );
        assert_eq!(
            Algorithm::from_manifest(Some("MD5"))
                .unwrap_err()
                .to_string(),
            "unknown Checksum-Algorithm \"MD5\""
        );
    }
}
