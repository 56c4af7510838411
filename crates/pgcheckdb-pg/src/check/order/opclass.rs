//! From an index column's operator class and collation (catalog rows) to its comparator. Only
//! PostgreSQL's own B-tree operator classes (created at initdb, OID below
//! `FirstNormalObjectId`, in `pg_catalog`) are recognised, by name and input type; anything
//! else is not order-checked.

use super::collate::{is_c_locale, libc_locale, Collate};
use super::datum::KeyType;
use super::NotOrderChecked;
use crate::catalog::attributes::Attribute;
use crate::catalog::index_meta::{CollProvider, IndexMeta, OpClass, OrderCatalog};
use crate::catalog::FIRST_NORMAL_OBJECT_ID;
use crate::format::oids::am_oid;

/// `PG_CATALOG_NAMESPACE`.
const PG_CATALOG_NAMESPACE: u32 = 11;
/// `DEFAULT_COLLATION_OID`.
const DEFAULT_COLLATION_OID: u32 = 100;

/// Built-in type OIDs (`pg_type.dat`).
mod type_oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const CHAR: u32 = 18;
    pub const NAME: u32 = 19;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const OID: u32 = 26;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const BPCHAR: u32 = 1042;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const NUMERIC: u32 = 1700;
    pub const UUID: u32 = 2950;
    pub const OIDVECTOR: u32 = 30;
}

/// What a built-in operator class compares.
enum Class {
    Plain(KeyType),
    /// A collatable class: the comparator once the collation is known.
    Collated(fn(Collate) -> KeyType),
}

/// The built-in B-tree operator class `name` over type `intype`, if pgcheckdb compares it.
fn builtin_class(name: &str, intype: u32) -> Option<Class> {
    use type_oid as t;
    let plain = |k| Some(Class::Plain(k));
    match (name, intype) {
        ("int2_ops", t::INT2) => plain(KeyType::Int2),
        ("int4_ops", t::INT4) => plain(KeyType::Int4),
        ("int8_ops", t::INT8) => plain(KeyType::Int8),
        ("oid_ops", t::OID) => plain(KeyType::Oid),
        ("bool_ops", t::BOOL) => plain(KeyType::Bool),
        ("char_ops", t::CHAR) => plain(KeyType::Char),
        ("float4_ops", t::FLOAT4) => plain(KeyType::Float4),
        ("float8_ops", t::FLOAT8) => plain(KeyType::Float8),
        ("numeric_ops", t::NUMERIC) => plain(KeyType::Numeric),
        ("date_ops", t::DATE) => plain(KeyType::Date),
        ("time_ops", t::TIME) => plain(KeyType::Time),
        ("timestamp_ops", t::TIMESTAMP) | ("timestamptz_ops", t::TIMESTAMPTZ) => {
            plain(KeyType::Timestamp)
        }
        ("interval_ops", t::INTERVAL) => plain(KeyType::Interval),
        ("uuid_ops", t::UUID) => plain(KeyType::Uuid),
        ("bytea_ops", t::BYTEA) => plain(KeyType::Bytea),
        ("text_pattern_ops", t::TEXT) | ("varchar_pattern_ops", t::TEXT) => {
            plain(KeyType::TextPattern)
        }
        ("bpchar_pattern_ops", t::BPCHAR) => plain(KeyType::BpcharPattern),
        ("oidvector_ops", t::OIDVECTOR) => plain(KeyType::OidVector),
        ("name_ops", t::NAME) => Some(Class::Collated(KeyType::Name)),
        ("text_ops", t::TEXT) | ("varchar_ops", t::TEXT) => Some(Class::Collated(KeyType::Text)),
        ("bpchar_ops", t::BPCHAR) => Some(Class::Collated(KeyType::Bpchar)),
        _ => None,
    }
}

/// A B-tree operator class that came with PostgreSQL, in a B-tree family (when `pg_opfamily`
/// was read).
fn is_builtin(order: &OrderCatalog, db: u32, oid: u32, class: &OpClass) -> bool {
    let family_ok = order
        .opfamilies
        .get(&(db, class.family))
        .is_none_or(|f| f.method == am_oid::BTREE && class.family < FIRST_NORMAL_OBJECT_ID);
    oid < FIRST_NORMAL_OBJECT_ID
        && class.method == am_oid::BTREE
        && class.namespace == PG_CATALOG_NAMESPACE
        && family_ok
}

/// The comparator of key column `i` (0-based) of an index, described by `attr` (the index's
/// own `pg_attribute` row), in database `db`.
pub fn key_type(
    order: &OrderCatalog,
    db: u32,
    meta: &IndexMeta,
    i: usize,
    attr: &Attribute,
) -> Result<KeyType, NotOrderChecked> {
    let column = attr.label();
    let class_oid = meta.indclass.get(i).copied().unwrap_or(0);
    let class =
        order
            .opclasses
            .get(&(db, class_oid))
            .ok_or_else(|| NotOrderChecked::UnknownOpclass {
                column: column.clone(),
                opclass: class_oid,
            })?;
    let unsupported = || NotOrderChecked::UnsupportedOpclass {
        column: column.clone(),
        opclass: class.name.clone(),
    };
    if !is_builtin(order, db, class_oid, class) {
        return Err(unsupported());
    }
    let key_type = match builtin_class(&class.name, class.intype).ok_or_else(unsupported)? {
        Class::Plain(k) => k,
        Class::Collated(make) => {
            let coll = meta.indcollation.get(i).copied().unwrap_or(0);
            make(collation(order, db, coll, &column)?)
        }
    };
    if !key_type.fits(attr.attlen) {
        return Err(NotOrderChecked::StorageMismatch {
            column,
            opclass: class.name.clone(),
            attlen: attr.attlen,
        });
    }
    Ok(key_type)
}

/// How collation `oid` of database `db` orders strings.
fn collation(
    order: &OrderCatalog,
    db: u32,
    oid: u32,
    column: &str,
) -> Result<Collate, NotOrderChecked> {
    let unknown = || NotOrderChecked::UnknownCollation {
        column: column.to_string(),
        collation: oid,
    };
    let coll = order.collations.get(&(db, oid)).ok_or_else(unknown)?;
    let name = coll.name.clone();
    if !coll.deterministic {
        return Err(NotOrderChecked::NondeterministicCollation {
            column: column.to_string(),
            collation: name,
        });
    }
    let (provider, locale) = match coll.provider {
        CollProvider::Default if oid == DEFAULT_COLLATION_OID => {
            let d = order.databases.get(&db).ok_or_else(unknown)?;
            (d.provider, Some(d.collate.clone()))
        }
        p => (p, coll.collate.clone()),
    };
    match provider {
        // The built-in provider (C, C.UTF-8, PG_UNICODE_FAST) sorts by code point, which is
        // byte order in UTF-8.
        CollProvider::Builtin => Ok(Collate::Bytes),
        CollProvider::Libc => {
            let locale = locale.ok_or_else(unknown)?;
            if is_c_locale(&locale) {
                return Ok(Collate::Bytes);
            }
            libc_locale(&locale)
                .map(Collate::Libc)
                .ok_or(NotOrderChecked::LocaleMissing {
                    column: column.to_string(),
                    collation: name,
                    locale,
                })
        }
        CollProvider::Icu => Err(NotOrderChecked::IcuCollation {
            column: column.to_string(),
            collation: name,
        }),
        CollProvider::Default | CollProvider::Other(_) => Err(NotOrderChecked::UnknownProvider {
            column: column.to_string(),
            collation: name,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::index_meta::{Collation, DatabaseLocale};

    const DB: u32 = 5;

    fn catalog(default: CollProvider, datcollate: &str) -> OrderCatalog {
        let mut order = OrderCatalog::default();
        order.databases.insert(
            DB,
            DatabaseLocale {
                provider: default,
                collate: datcollate.into(),
            },
        );
        let mut add = |oid, name: &str, provider, deterministic, collate: Option<&str>| {
            let c = Collation {
                name: name.into(),
                provider,
                deterministic,
                collate: collate.map(String::from),
            };
            order.collations.insert((DB, oid), c);
        };
        add(100, "default", CollProvider::Default, true, None);
        add(950, "C", CollProvider::Libc, true, Some("C"));
        add(951, "POSIX", CollProvider::Libc, true, Some("POSIX"));
        add(811, "pg_c_utf8", CollProvider::Builtin, true, None);
        add(
            20000,
            "missing",
            CollProvider::Libc,
            true,
            Some("xx_XX.nowhere"),
        );
        add(20001, "und-x-icu", CollProvider::Icu, true, None);
        add(20002, "nd", CollProvider::Icu, false, None);
        add(20003, "cutf8", CollProvider::Libc, true, Some("C.utf8"));
        order
    }

    fn resolve(order: &OrderCatalog, oid: u32) -> Result<String, NotOrderChecked> {
        collation(order, DB, oid, "c text").map(|c| c.describe())
    }

    #[test]
    fn byte_order_collations() {
        let order = catalog(CollProvider::Libc, "C");
        for oid in [100, 950, 951, 811] {
            assert_eq!(
                resolve(&order, oid),
                Ok("byte order".into()),
                "collation {oid}"
            );
        }
        let builtin_default = catalog(CollProvider::Builtin, "C.UTF-8");
        assert_eq!(resolve(&builtin_default, 100), Ok("byte order".into()));
    }

    #[test]
    fn libc_locales_opened_or_reported_missing() {
        let order = catalog(CollProvider::Libc, "xx_XX.nowhere");
        let missing = resolve(&order, 20000).expect_err("no such locale");
        assert_eq!(missing.missing_locale(), Some("xx_XX.nowhere"));
        assert_eq!(
            resolve(&order, 100)
                .expect_err("default in a missing locale")
                .missing_locale(),
            Some("xx_XX.nowhere")
        );
        // C.utf8 ships with the C library: compared with strcoll_l.
        assert_eq!(resolve(&order, 20003), Ok("libc locale \"C.utf8\"".into()));
    }

    #[test]
    fn icu_nondeterministic_and_unknown_are_not_guessed() {
        let order = catalog(CollProvider::Icu, "und");
        assert!(matches!(
            resolve(&order, 20001),
            Err(NotOrderChecked::IcuCollation { .. })
        ));
        assert!(matches!(
            resolve(&order, 100),
            Err(NotOrderChecked::IcuCollation { .. })
        ));
        assert!(matches!(
            resolve(&order, 20002),
            Err(NotOrderChecked::NondeterministicCollation { .. })
        ));
        assert!(matches!(
            resolve(&order, 4242),
            Err(NotOrderChecked::UnknownCollation {
                collation: 4242,
                ..
            })
        ));
    }
}
