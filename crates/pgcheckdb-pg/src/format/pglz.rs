//! PostgreSQL's own compression (`pglz`) of inline varlena values, decompression only, from
//! the format: a control byte announces the next eight items, least significant bit first; a
//! clear bit is one literal byte, a set bit a back-reference of two or three bytes: the first
//! byte's low nibble is the length minus 3 (15 means "add a third byte"), its high nibble and
//! the second byte the 12-bit distance back into the output.

/// Decompresses `src` into exactly `raw_size` bytes, `None` if the data is malformed.
pub fn decompress(src: &[u8], raw_size: usize) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(raw_size);
    let mut i = 0;
    while i < src.len() && out.len() < raw_size {
        let control = src[i];
        i += 1;
        for bit in 0..8 {
            if i >= src.len() || out.len() >= raw_size {
                break;
            }
            if control & (1 << bit) == 0 {
                out.push(src[i]);
                i += 1;
                continue;
            }
            let (b0, b1) = (src[i] as usize, *src.get(i + 1)? as usize);
            i += 2;
            let mut len = (b0 & 0x0f) + 3;
            let distance = ((b0 & 0xf0) << 4) | b1;
            if len == 18 {
                len += *src.get(i)? as usize;
                i += 1;
            }
            if distance == 0 || distance > out.len() {
                return None;
            }
            let start = out.len() - distance;
            for k in 0..len.min(raw_size - out.len()) {
                let byte = out[start + k];
                out.push(byte);
            }
        }
    }
    (out.len() == raw_size).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_back_references() {
        // "abc" as literals, then a reference of length 6 at distance 3: "abcabcabc".
        let src = [0b0000_1000, b'a', b'b', b'c', 0x03, 0x03];
        assert_eq!(decompress(&src, 9).as_deref(), Some(&b"abcabcabc"[..]));
        // Long reference: length 18 + 2 = 20 of 'x'.
        let src = [0b0000_0010, b'x', 0x0f, 0x01, 2];
        assert_eq!(decompress(&src, 21), Some(vec![b'x'; 21]));
        // Distance beyond the output.
        assert_eq!(decompress(&[0b1, 0x00, 0x05], 3), None);
    }
}
