//! String order under a collation: byte order (C, POSIX, the built-in provider's code point
//! order, which is UTF-8 byte order) or a C library locale compared with `strcoll_l`, ties
//! broken by byte order as PostgreSQL does for deterministic collations. Locales are opened
//! once per process and shared.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, OnceLock};

use crate::format::bytes::le_u64_words;

/// An open C library locale (`newlocale`), used only for `strcoll_l`.
#[derive(Debug)]
pub struct LibcLocale {
    name: String,
    handle: libc::locale_t,
}

// SAFETY: a locale_t is only read by strcoll_l after newlocale returned it, never changed or
// freed while shared (the process-wide cache keeps it alive), and glibc's strcoll_l is
// thread-safe for a given locale object.
unsafe impl Send for LibcLocale {}
unsafe impl Sync for LibcLocale {}

impl LibcLocale {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `strcoll_l` of two strings without NUL bytes; `None` if either contains one.
    fn strcoll(&self, a: &[u8], b: &[u8]) -> Option<Ordering> {
        with_c_string(a, |a| {
            with_c_string(b, |b| {
                // SAFETY: both pointers are NUL-terminated strings that live across the call
                // and the handle is a valid locale (see above).
                let r = unsafe { strcoll_l(a, b, self.handle) };
                r.cmp(&0)
            })
        })
        .flatten()
    }
}

/// Strings up to this length are NUL-terminated on the stack, longer ones on the heap.
const STACK_STRING: usize = 256;

/// Whether `s` holds a NUL byte, eight bytes at a time (the keys compared are short: a call
/// into the general byte search cost more than the test).
fn has_nul(s: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let (words, rest) = le_u64_words(s);
    for w in words {
        // Some byte of `w` is zero exactly when this is non-zero.
        if w.wrapping_sub(ONES) & !w & HIGHS != 0 {
            return true;
        }
    }
    rest.contains(&0)
}

/// Calls `f` with a NUL-terminated copy of `s`; `None` if `s` contains a NUL.
fn with_c_string<R>(s: &[u8], f: impl FnOnce(*const libc::c_char) -> R) -> Option<R> {
    if has_nul(s) {
        return None;
    }
    if s.len() < STACK_STRING {
        // Only the string and its NUL are written: zeroing the whole buffer first cost more
        // than the copy for the short keys this is called with twice per comparison.
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); STACK_STRING];
        // SAFETY: `s.len() < STACK_STRING` bytes fit the buffer, which does not overlap `s`;
        // `MaybeUninit<u8>` has the layout of `u8`.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.as_mut_ptr().cast::<u8>(), s.len())
        };
        buf[s.len()].write(0);
        return Some(f(buf.as_ptr().cast()));
    }
    let owned = CString::new(s).ok()?;
    Some(f(owned.as_ptr()))
}

extern "C" {
    /// POSIX.1-2008 `strcoll_l` (the `libc` crate does not declare it).
    fn strcoll_l(
        a: *const libc::c_char,
        b: *const libc::c_char,
        locale: libc::locale_t,
    ) -> libc::c_int;
}

type LocaleCache = Mutex<HashMap<String, Option<Arc<LibcLocale>>>>;

fn cache() -> &'static LocaleCache {
    static CACHE: OnceLock<LocaleCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The C library's collation for locale `name` (`LC_COLLATE`), `None` when this machine does
/// not have it installed.
pub fn libc_locale(name: &str) -> Option<Arc<LibcLocale>> {
    let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = cache.get(name) {
        return found.clone();
    }
    let opened = CString::new(name).ok().and_then(|c| {
        // SAFETY: `c` is a valid NUL-terminated string; a null base asks for a new object.
        let handle =
            unsafe { libc::newlocale(libc::LC_COLLATE_MASK, c.as_ptr(), std::ptr::null_mut()) };
        (!handle.is_null()).then(|| {
            Arc::new(LibcLocale {
                name: name.to_string(),
                handle,
            })
        })
    });
    cache.insert(name.to_string(), opened.clone());
    opened
}

/// Whether a libc locale name means plain byte order to PostgreSQL (`C`, `POSIX`).
pub fn is_c_locale(name: &str) -> bool {
    name == "C" || name == "POSIX"
}

/// How strings of one key column are ordered.
#[derive(Debug, Clone)]
pub enum Collate {
    /// `memcmp`, then the shorter first.
    Bytes,
    /// `strcoll_l` in a C library locale, ties broken by byte order.
    Libc(Arc<LibcLocale>),
}

impl Collate {
    /// Orders two strings (without trailing NULs) as `varstr_cmp` does for this collation.
    pub fn compare(&self, a: &[u8], b: &[u8]) -> Option<Ordering> {
        match self {
            Collate::Bytes => Some(a.cmp(b)),
            Collate::Libc(_) if a == b => Some(Ordering::Equal),
            Collate::Libc(locale) => match locale.strcoll(a, b)? {
                Ordering::Equal => Some(a.cmp(b)),
                other => Some(other),
            },
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Collate::Bytes => "byte order".into(),
            Collate::Libc(l) => format!("libc locale \"{}\"", l.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_bytes_are_found_at_every_position_and_length() {
        for len in 0..40 {
            let clean: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(!has_nul(&clean), "{len}");
            // Bytes 0x80 and 0x01 around the word boundaries must not look like a NUL.
            let high: Vec<u8> = (0..len)
                .map(|i| if i % 2 == 0 { 0x80 } else { 0x01 })
                .collect();
            assert!(!has_nul(&high), "{len}");
            for at in 0..len {
                let mut s = clean.clone();
                s[at] = 0;
                assert!(has_nul(&s), "{len} {at}");
            }
        }
        assert_eq!(with_c_string(b"ab\0c", |_| ()), None);
        assert_eq!(
            with_c_string(b"abc", |p| unsafe { libc::strlen(p) }),
            Some(3)
        );
    }
}
