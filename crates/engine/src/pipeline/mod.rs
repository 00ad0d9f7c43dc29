//! The transfer's stages and the bounded queues between them:
//! `scan -> plan -> read` ([`source`]), then either the network ([`send`] on one side,
//! [`receive`] on the other) or a memory hand-off, then `write` ([`sink`]). The roles
//! (`crate::roles`) compose them; nothing here knows about sessions or who is client.
//! [`skip`] decides what the destination already has, [`digest`] computes the content digests
//! `--checksum` compares. [`kernel_copy`] puts a local copy's large files in place beside
//! the batches.

pub(crate) mod digest;
pub(crate) mod kernel_copy;
pub(crate) mod plan;
pub(crate) mod receive;
pub(crate) mod send;
pub(crate) mod sink;
pub(crate) mod skip;
pub(crate) mod source;
pub(crate) mod special;
