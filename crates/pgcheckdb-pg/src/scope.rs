//! The scope of a run: which databases, schemas, tables and indexes to check (pg_amcheck's
//! `-d/-s/-t/-i` patterns, their exclusions and the dependent indexes and TOAST tables of the
//! tables chosen), and which file numbers (pg_checksums' `-f`). The selection is made from the
//! offline catalog before the scan is planned, so a scoped run reads only the chosen relations'
//! files (every fork and segment of them).
//!
//! Patterns follow psql: `*` matches any run of characters, `?` one character, unquoted letters
//! fold to lower case, double-quoted parts are taken exactly (`""` is one quote), and `.`
//! separates `database.schema.relation`.

use std::collections::{HashMap, HashSet};

use crate::catalog::{tablespace_of_path, Catalog, FileKey, RelKind, RelationInfo};
use crate::datadir::RelationFile;
use crate::finding::Finding;

/// Why a selection (`-d`, `-n`, `-t`, `-i` and their exclusions) cannot be made. The
/// patterns are quoted as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// More dotted parts than the option takes (as psql says it).
    #[error("improper qualified name (too many dotted names): {0}")]
    TooManyDots(String),
    /// `--strict-names`: a `-d` pattern that names no database.
    #[error("no databases to check matching \"{0}\"")]
    NoDatabaseMatching(String),
    #[error("no databases to check")]
    NoDatabases,
    /// `--strict-names`: a `-n` pattern whose schemas hold no relation.
    #[error("no relations to check in schemas matching \"{0}\"")]
    NoRelationsInSchemas(String),
    /// `--strict-names`: a `-t` pattern that names no table.
    #[error("no relations to check matching \"{0}\"")]
    NoRelationsMatching(String),
    /// `--strict-names`: a `-i` pattern that names no index.
    #[error("no indexes to check matching \"{0}\"")]
    NoIndexesMatching(String),
    #[error("no relations to check")]
    NoRelations,
}

/// What the command line asked for.
#[derive(Debug, Clone, Default)]
pub struct ScopeOptions {
    pub databases: Vec<String>,
    pub exclude_databases: Vec<String>,
    pub schemas: Vec<String>,
    pub exclude_schemas: Vec<String>,
    pub tables: Vec<String>,
    pub exclude_tables: Vec<String>,
    pub indexes: Vec<String>,
    pub exclude_indexes: Vec<String>,
    pub no_dependent_indexes: bool,
    pub no_dependent_toast: bool,
    /// File numbers (`relfilenode`) to check, in any database.
    pub filenodes: Vec<u32>,
    /// Whether an include pattern matching nothing is an error (pg_amcheck's default).
    pub strict_names: bool,
}

impl ScopeOptions {
    /// Whether the whole cluster is to be checked.
    pub fn is_everything(&self) -> bool {
        self.databases.is_empty()
            && self.exclude_databases.is_empty()
            && !self.selects_relations()
            && self.exclude_schemas.is_empty()
            && self.exclude_tables.is_empty()
            && self.exclude_indexes.is_empty()
            && self.filenodes.is_empty()
    }

    fn selects_relations(&self) -> bool {
        !(self.schemas.is_empty() && self.tables.is_empty() && self.indexes.is_empty())
    }

    fn excludes_relations(&self) -> bool {
        !(self.exclude_schemas.is_empty()
            && self.exclude_tables.is_empty()
            && self.exclude_indexes.is_empty())
    }
}

/// One piece of a glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Char(char),
    /// `*`
    AnyRun,
    /// `?`
    AnyOne,
}

/// A glob over one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(Vec<Piece>);

impl Glob {
    pub fn matches(&self, name: &str) -> bool {
        let chars: Vec<char> = name.chars().collect();
        glob_match(&self.0, &chars)
    }
}

fn glob_match(pat: &[Piece], s: &[char]) -> bool {
    // Iterative matching with one backtrack point for the last `*`.
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        match pat.get(p) {
            Some(Piece::AnyRun) => {
                star = Some((p, i));
                p += 1;
            }
            Some(Piece::AnyOne) => {
                p += 1;
                i += 1;
            }
            Some(Piece::Char(c)) if *c == s[i] => {
                p += 1;
                i += 1;
            }
            _ => match star {
                Some((sp, si)) => {
                    p = sp + 1;
                    i = si + 1;
                    star = Some((sp, si + 1));
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|x| *x == Piece::AnyRun)
}

/// A parsed `[database.][schema.]name` pattern: the parts given, outermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePattern {
    pub text: String,
    pub database: Option<Glob>,
    pub schema: Option<Glob>,
    pub name: Option<Glob>,
}

/// How many dotted parts a pattern of each kind may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternKind {
    Database,
    Schema,
    Relation,
}

/// Splits a pattern into its dotted parts, folding unquoted letters to lower case.
fn split_parts(text: &str) -> Vec<Vec<Piece>> {
    let mut parts = vec![Vec::new()];
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let part = parts.last_mut().expect("at least one part");
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                part.push(Piece::Char('"'));
            }
            '"' => quoted = !quoted,
            _ if quoted => part.push(Piece::Char(c)),
            '.' => parts.push(Vec::new()),
            '*' => part.push(Piece::AnyRun),
            '?' => part.push(Piece::AnyOne),
            _ => part.push(Piece::Char(c.to_ascii_lowercase())),
        }
    }
    parts
}

impl NamePattern {
    /// Parses `text` as a pattern of `kind`; too many dotted parts is an error, as in psql.
    pub fn parse(text: &str, kind: PatternKind) -> Result<NamePattern, ScopeError> {
        let mut parts: Vec<Glob> = split_parts(text).into_iter().map(Glob).collect();
        let max = match kind {
            PatternKind::Database => 1,
            PatternKind::Schema => 2,
            PatternKind::Relation => 3,
        };
        if parts.len() > max {
            return Err(ScopeError::TooManyDots(text.to_string()));
        }
        let mut out = NamePattern {
            text: text.to_string(),
            database: None,
            schema: None,
            name: None,
        };
        let slots: [&mut Option<Glob>; 3] = [&mut out.name, &mut out.schema, &mut out.database];
        let skip = match kind {
            PatternKind::Database => 2,
            PatternKind::Schema => 1,
            PatternKind::Relation => 0,
        };
        for slot in slots.into_iter().skip(skip) {
            match parts.pop() {
                Some(g) => *slot = Some(g),
                None => break,
            }
        }
        Ok(out)
    }

    /// Whether a database called `db` fits the pattern's database part.
    fn database_fits(&self, db: &str) -> bool {
        self.database.as_ref().is_none_or(|g| g.matches(db))
    }

    fn schema_fits(&self, schema: &str) -> bool {
        self.schema.as_ref().is_none_or(|g| g.matches(schema))
    }

    fn name_fits(&self, name: &str) -> bool {
        self.name.as_ref().is_none_or(|g| g.matches(name))
    }
}

fn parse_all(texts: &[String], kind: PatternKind) -> Result<Vec<NamePattern>, ScopeError> {
    texts.iter().map(|t| NamePattern::parse(t, kind)).collect()
}

/// The chosen part of a cluster.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Database oids whose directories are in scope; `None`: all. Shared catalogs (oid 0)
    /// are in scope whenever a database is.
    databases: Option<HashSet<u32>>,
    /// Relations (by file key) in scope; `None`: every file of the databases in scope.
    relations: Option<HashSet<FileKey>>,
    /// Relations taken out by an exclusion, when no relation was selected explicitly.
    excluded: HashSet<FileKey>,
    filenodes: Option<HashSet<u32>>,
}

/// A relation as patterns see it.
struct Candidate<'a> {
    key: FileKey,
    rel: &'a RelationInfo,
    schema: &'a str,
    name: &'a str,
    /// Names of the databases the relation counts as being in (every one for shared catalogs).
    databases: Vec<&'a str>,
}

impl Candidate<'_> {
    fn fits(&self, p: &NamePattern) -> bool {
        p.schema_fits(self.schema)
            && p.name_fits(self.name)
            && self.databases.iter().any(|d| p.database_fits(d))
    }

    fn is_table_like(&self) -> bool {
        matches!(
            self.rel.kind,
            RelKind::Table | RelKind::MaterializedView | RelKind::Sequence | RelKind::Toast
        )
    }
}

impl Scope {
    /// Everything.
    pub fn everything() -> Scope {
        Scope::default()
    }

    /// Resolves the options against the catalog. An include pattern that matches nothing is an
    /// error under `strict_names`, as is a selection with nothing in it.
    pub fn select(opts: &ScopeOptions, catalog: &Catalog) -> Result<Scope, ScopeError> {
        if opts.is_everything() {
            return Ok(Scope::everything());
        }
        let mut scope = Scope {
            filenodes: (!opts.filenodes.is_empty())
                .then(|| opts.filenodes.iter().copied().collect()),
            ..Scope::default()
        };
        let db_names = select_databases(opts, catalog, &mut scope)?;
        if opts.selects_relations() || opts.excludes_relations() {
            let candidates = candidates(catalog, &db_names);
            let excluded = excluded_keys(opts, &candidates)?;
            if opts.selects_relations() {
                scope.relations = Some(included_keys(opts, &candidates, &excluded, catalog)?);
            } else {
                scope.excluded = excluded;
            }
        }
        Ok(scope)
    }

    /// Whether nothing was left out.
    pub fn is_everything(&self) -> bool {
        self.databases.is_none()
            && self.relations.is_none()
            && self.excluded.is_empty()
            && self.filenodes.is_none()
    }

    fn database_in_scope(&self, db: u32) -> bool {
        db == 0 || self.databases.as_ref().is_none_or(|s| s.contains(&db))
    }

    fn key_in_scope(&self, key: FileKey) -> bool {
        self.database_in_scope(key.0)
            && self.relations.as_ref().is_none_or(|s| s.contains(&key))
            && !self.excluded.contains(&key)
            && self.filenodes.as_ref().is_none_or(|s| s.contains(&key.2))
    }

    /// Whether a relation file is to be read.
    pub fn keeps_file(&self, f: &RelationFile) -> bool {
        self.key_in_scope(crate::catalog::file_key(f))
    }

    /// Whether a finding concerns the scope: its relation file is in scope, or, for findings
    /// about no relation file, its database is.
    pub fn keeps_finding(&self, f: &Finding) -> bool {
        let db = f.database.as_ref().and_then(|d| d.oid);
        let node = f.relation.as_ref().and_then(|r| r.filenode);
        match (db, node) {
            (Some(db), Some(node)) => self.key_in_scope((db, tablespace_of_path(&f.file), node)),
            (Some(db), None) => {
                self.database_in_scope(db) && self.relations.is_none() && self.filenodes.is_none()
            }
            _ => self.relations.is_none() && self.filenodes.is_none(),
        }
    }
}

/// Applies `-d` and `--exclude-database`; returns the names of the databases in scope by oid.
fn select_databases(
    opts: &ScopeOptions,
    catalog: &Catalog,
    scope: &mut Scope,
) -> Result<HashMap<u32, String>, ScopeError> {
    let include = parse_all(&opts.databases, PatternKind::Database)?;
    let exclude = parse_all(&opts.exclude_databases, PatternKind::Database)?;
    let mut chosen = HashMap::new();
    let mut matched = vec![false; include.len()];
    for db in catalog.databases.values() {
        let hits: Vec<usize> = (0..include.len())
            .filter(|&i| include[i].database_fits(&db.name))
            .collect();
        let wanted = include.is_empty() || !hits.is_empty();
        let dropped = exclude.iter().any(|p| p.database_fits(&db.name));
        if wanted && !dropped {
            hits.iter().for_each(|&i| matched[i] = true);
            chosen.insert(db.oid, db.name.clone());
        }
    }
    if opts.strict_names {
        if let Some(i) = matched.iter().position(|m| !m) {
            return Err(ScopeError::NoDatabaseMatching(include[i].text.clone()));
        }
    }
    if chosen.is_empty() && (!include.is_empty() || !exclude.is_empty()) {
        return Err(ScopeError::NoDatabases);
    }
    if !include.is_empty() || !exclude.is_empty() {
        scope.databases = Some(chosen.keys().copied().collect());
    }
    Ok(chosen)
}

/// Every catalogued relation with storage in a database in scope (and the shared catalogs).
fn candidates<'a>(catalog: &'a Catalog, dbs: &'a HashMap<u32, String>) -> Vec<Candidate<'a>> {
    let all_dbs: Vec<&str> = dbs.values().map(String::as_str).collect();
    let mut out: Vec<Candidate> = catalog
        .relations
        .iter()
        .filter(|(key, rel)| rel.kind.has_storage() && (key.0 == 0 || dbs.contains_key(&key.0)))
        .map(|(key, rel)| {
            let (schema, name) = rel.name.split_once('.').unwrap_or(("", &rel.name));
            let databases = match dbs.get(&key.0) {
                Some(d) => vec![d.as_str()],
                None => all_dbs.clone(),
            };
            Candidate {
                key: *key,
                rel,
                schema,
                name,
                databases,
            }
        })
        .collect();
    out.sort_by_key(|c| c.key);
    out
}

/// Relations an exclusion pattern names.
fn excluded_keys(
    opts: &ScopeOptions,
    candidates: &[Candidate],
) -> Result<HashSet<FileKey>, ScopeError> {
    let schemas = parse_all(&opts.exclude_schemas, PatternKind::Schema)?;
    let tables = parse_all(&opts.exclude_tables, PatternKind::Relation)?;
    let indexes = parse_all(&opts.exclude_indexes, PatternKind::Relation)?;
    Ok(candidates
        .iter()
        .filter(|c| {
            schemas
                .iter()
                .any(|p| p.database_fits_any(&c.databases) && p.schema_fits(c.schema))
                || (c.is_table_like() && tables.iter().any(|p| c.fits(p)))
                || (c.rel.kind == RelKind::Index && indexes.iter().any(|p| c.fits(p)))
        })
        .map(|c| c.key)
        .collect())
}

impl NamePattern {
    /// For schema patterns (`[db.]schema`): whether any of `dbs` fits the database part.
    fn database_fits_any(&self, dbs: &[&str]) -> bool {
        dbs.iter().any(|d| self.database_fits(d))
    }
}

/// The relations the include patterns select, with the dependents of the tables among them.
fn included_keys(
    opts: &ScopeOptions,
    candidates: &[Candidate],
    excluded: &HashSet<FileKey>,
    catalog: &Catalog,
) -> Result<HashSet<FileKey>, ScopeError> {
    let schemas = parse_all(&opts.schemas, PatternKind::Schema)?;
    let tables = parse_all(&opts.tables, PatternKind::Relation)?;
    let indexes = parse_all(&opts.indexes, PatternKind::Relation)?;
    let mut chosen = HashSet::new();
    let mut unmatched = Vec::new();
    type Unmatched = fn(String) -> ScopeError;
    let groups: [(&[NamePattern], PatternKind, Unmatched); 3] = [
        (
            &schemas,
            PatternKind::Schema,
            ScopeError::NoRelationsInSchemas,
        ),
        (
            &tables,
            PatternKind::Relation,
            ScopeError::NoRelationsMatching,
        ),
        (
            &indexes,
            PatternKind::Relation,
            ScopeError::NoIndexesMatching,
        ),
    ];
    for (gi, (patterns, _, unmatched_error)) in groups.iter().enumerate() {
        for p in patterns.iter() {
            let mut hit = false;
            for c in candidates.iter().filter(|c| !excluded.contains(&c.key)) {
                let fits = match gi {
                    0 => p.database_fits_any(&c.databases) && p.schema_fits(c.schema),
                    1 => c.is_table_like() && c.fits(p),
                    _ => c.rel.kind == RelKind::Index && c.fits(p),
                };
                if fits {
                    hit = true;
                    chosen.insert(c.key);
                }
            }
            if !hit {
                unmatched.push(unmatched_error(p.text.clone()));
            }
        }
    }
    if opts.strict_names {
        if let Some(first) = unmatched.into_iter().next() {
            return Err(first);
        }
    }
    add_dependents(opts, &mut chosen, excluded, catalog);
    if chosen.is_empty() {
        return Err(ScopeError::NoRelations);
    }
    Ok(chosen)
}

/// Adds the indexes and TOAST tables (with their indexes) of the tables in `chosen`.
fn add_dependents(
    opts: &ScopeOptions,
    chosen: &mut HashSet<FileKey>,
    excluded: &HashSet<FileKey>,
    catalog: &Catalog,
) {
    let mut by_oid: HashMap<(u32, u32), FileKey> = HashMap::new();
    let mut indexes_of: HashMap<(u32, &str), Vec<FileKey>> = HashMap::new();
    for (key, rel) in &catalog.relations {
        by_oid.insert((key.0, rel.oid), *key);
        if let (RelKind::Index, Some(owner)) = (rel.kind, rel.owner.as_deref()) {
            indexes_of.entry((key.0, owner)).or_default().push(*key);
        }
    }
    let tables: Vec<FileKey> = chosen
        .iter()
        .copied()
        .filter(|k| {
            catalog.relations.get(k).is_some_and(|r| {
                matches!(
                    r.kind,
                    RelKind::Table | RelKind::MaterializedView | RelKind::Toast
                )
            })
        })
        .collect();
    let add = |key: FileKey, chosen: &mut HashSet<FileKey>| {
        if !excluded.contains(&key) {
            chosen.insert(key);
        }
    };
    for table in tables {
        let Some(rel) = catalog.relations.get(&table) else {
            continue;
        };
        if !opts.no_dependent_indexes {
            for &ix in indexes_of.get(&(table.0, &*rel.name)).into_iter().flatten() {
                add(ix, chosen);
            }
        }
        if opts.no_dependent_toast || rel.reltoastrelid == 0 {
            continue;
        }
        let Some(&toast) = by_oid.get(&(table.0, rel.reltoastrelid)) else {
            continue;
        };
        add(toast, chosen);
        // The TOAST table's own index is part of it: without it no value can be found.
        let toast_name = catalog.relations.get(&toast).map(|r| &*r.name);
        if let Some(name) = toast_name {
            for &ix in indexes_of.get(&(table.0, name)).into_iter().flatten() {
                add(ix, chosen);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(p: &str) -> NamePattern {
        NamePattern::parse(p, PatternKind::Relation).expect("parse")
    }

    #[test]
    fn globs_match_like_psql() {
        let p = rel("acc*");
        assert!(p.name_fits("accounts") && p.name_fits("acc") && !p.name_fits("xaccounts"));
        assert!(rel("a?c").name_fits("abc") && !rel("a?c").name_fits("ac"));
        assert!(rel("*_pkey").name_fits("accounts_pkey"));
        assert!(rel("*a*b*").name_fits("xxaxxbxx") && !rel("*a*b*").name_fits("xxbxxa"));
    }

    #[test]
    fn unquoted_names_fold_and_quoted_parts_are_exact() {
        assert!(rel("Accounts").name_fits("accounts"));
        assert!(!rel("\"Accounts\"").name_fits("accounts"));
        assert!(rel("\"Accounts\"").name_fits("Accounts"));
        assert!(rel("\"a.b*\"").name_fits("a.b*") && !rel("\"a.b*\"").name_fits("a.bc"));
        assert!(rel("\"say \"\"hi\"\"\"").name_fits("say \"hi\""));
    }

    #[test]
    fn dotted_parts_fill_from_the_right() {
        let p = rel("db1.public.t");
        assert!(p.database_fits("db1") && !p.database_fits("db2"));
        assert!(p.schema_fits("public") && p.name_fits("t"));
        let p = rel("public.t");
        assert!(p.database.is_none() && p.schema_fits("public") && !p.schema_fits("other"));
        let s = NamePattern::parse("db.sch", PatternKind::Schema).expect("parse");
        assert!(s.name.is_none() && s.schema_fits("sch") && s.database_fits("db"));
        assert!(NamePattern::parse("a.b.c.d", PatternKind::Relation).is_err());
        assert!(NamePattern::parse("a.b", PatternKind::Database).is_err());
    }

    #[test]
    fn messages_are_the_old_texts() {
        let p = || "public.t*".to_string();
        let cases = [
            (
                NamePattern::parse("a.b.c.d", PatternKind::Relation).unwrap_err(),
                "improper qualified name (too many dotted names): a.b.c.d",
            ),
            (
                ScopeError::NoDatabaseMatching("db*".into()),
                "no databases to check matching \"db*\"",
            ),
            (ScopeError::NoDatabases, "no databases to check"),
            (
                ScopeError::NoRelationsInSchemas("s*".into()),
                "no relations to check in schemas matching \"s*\"",
            ),
            (
                ScopeError::NoRelationsMatching(p()),
                "no relations to check matching \"public.t*\"",
            ),
            (
                ScopeError::NoIndexesMatching(p()),
                "no indexes to check matching \"public.t*\"",
            ),
            (ScopeError::NoRelations, "no relations to check"),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
