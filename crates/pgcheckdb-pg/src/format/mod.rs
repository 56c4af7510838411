//! The ground floor: PostgreSQL's on-disk formats as bytes. Pages and their header, line
//! pointers (`ItemIdData`), heap and index tuples and the values they store, each access
//! method's special space, the control file, the data checksum, relation file names and
//! catalog OIDs. Every decoder takes
//! untrusted bytes and returns `None` (or an error) instead of reading out of bounds, through
//! the one checked reader in [`bytes`]. Nothing here imports from any other floor.

pub mod brin;
pub mod btree;
pub mod bytes;
pub mod checksum;
pub mod control;
pub mod datum;
pub mod enums;
pub mod gin;
pub mod gist;
pub mod hash;
pub mod hash_buckets;
pub mod heap;
pub mod index_tuple;
pub mod itemid;
pub mod lsn;
pub mod oids;
pub mod page;
pub mod pglz;
pub mod relfile;
pub mod slru;
pub mod special;
pub mod spgist;
pub mod toast;
pub mod vm;
