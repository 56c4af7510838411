//! String order under a collation: byte order (C, POSIX, the built-in provider's code point
//! order, which is UTF-8 byte order) or a C library locale compared with `strcoll_l`, ties
//! broken by byte order as PostgreSQL does for deterministic collations. Locales are opened
//! once per process and shared.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, OnceLock};

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

/// Calls `f` with a NUL-terminated copy of `s`; `None` if `s` contains a NUL.
fn with_c_string<R>(s: &[u8], f: impl FnOnce(*const libc::c_char) -> R) -> Option<R> {
    if s.contains(&0) {
        return None;
    }
    if s.len() < STACK_STRING {
        // Only the string and its NUL are written: zeroing the whole buffer first cost more
        // than the copy for the short keys this is called with twice per comparison.
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); STACK_STRING];
        for (slot, &byte) in buf.iter_mut().zip(s) {
            slot.write(byte);
        }
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
