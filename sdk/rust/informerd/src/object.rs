//! Objects as the daemon serves them: the JSON the API server sent plus the metadata the daemon
//! parsed out of it.
use std::sync::Arc;

use informerd_api::v1;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// One Kubernetes object from an informer: its JSON bytes (shared, not copied, between clones)
/// and its parsed metadata. [`Object::decode`] turns it into any `serde` type, e.g. a
/// k8s-openapi `ConfigMap` or a `#[derive(CustomResource)]` type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Object {
    meta: Arc<v1::ObjectMeta>,
    json: prost::bytes::Bytes,
}

impl Object {
    /// Takes a wire object. An object without metadata gets empty metadata.
    pub fn from_proto(object: v1::Object) -> Object {
        Object {
            meta: Arc::new(object.metadata.unwrap_or_default()),
            json: object.json,
        }
    }

    /// The metadata the daemon parsed (namespace, name, uid, resourceVersion, labels, owners ...).
    pub fn meta(&self) -> &v1::ObjectMeta {
        &self.meta
    }

    /// The store key: `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> &str {
        &self.meta.key
    }

    /// metadata.namespace ("" for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        &self.meta.namespace
    }

    /// metadata.name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// metadata.uid.
    pub fn uid(&self) -> &str {
        &self.meta.uid
    }

    /// metadata.resourceVersion.
    pub fn resource_version(&self) -> &str {
        &self.meta.resource_version
    }

    /// metadata.generation.
    pub fn generation(&self) -> i64 {
        self.meta.generation
    }

    /// Whether metadata.deletionTimestamp is set.
    pub fn is_deleting(&self) -> bool {
        !self.meta.deletion_timestamp.is_empty()
    }

    /// The object's JSON as the API server sent it (after the informer's transform).
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// Decodes the JSON into `K`.
    pub fn decode<K: DeserializeOwned>(&self) -> Result<K> {
        serde_json::from_slice(&self.json).map_err(|source| Error::Decode {
            key: self.meta.key.clone(),
            type_name: std::any::type_name::<K>(),
            source,
        })
    }

    /// Decodes the JSON into an untyped `serde_json::Value`.
    pub fn value(&self) -> Result<serde_json::Value> {
        self.decode()
    }
}

/// The namespace and name of a key (`namespace/name` or `name`).
pub fn split_key(key: &str) -> (&str, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => ("", key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_json_and_names_the_key_when_it_cannot() {
        let o = Object::from_proto(v1::Object {
            json: prost::bytes::Bytes::from_static(br#"{"data":{"a":"1"}}"#),
            metadata: Some(v1::ObjectMeta {
                key: "ns/a".into(),
                namespace: "ns".into(),
                name: "a".into(),
                ..Default::default()
            }),
        });
        assert_eq!(o.key(), "ns/a");
        assert_eq!(o.value().unwrap()["data"]["a"], "1");
        let e = o.decode::<Vec<u8>>().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("decode ns/a as alloc::vec::Vec<u8>"),
            "{e}"
        );
        assert_eq!(split_key("ns/a"), ("ns", "a"));
        assert_eq!(split_key("node-1"), ("", "node-1"));
    }
}
