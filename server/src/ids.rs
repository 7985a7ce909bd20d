//! Lance Namespace string identifiers: components joined by a delimiter
//! (`$` unless the request names another). A view is `<namespace>$<name>`
//! or just `<name>`; any other namespace does not exist here.

use crate::errors::{ApiError, Code};
use axum::http::StatusCode;

pub const DEFAULT_DELIMITER: &str = "$";

/// The view name an identifier names, or NamespaceNotFound / InvalidInput.
pub fn resolve_id(
    id: &str,
    delimiter: Option<&str>,
    namespace: &[String],
) -> Result<String, ApiError> {
    let parts = components(id, delimiter)?;
    let (name, prefix) = parts
        .split_last()
        .expect("components() never returns an empty list");
    if !prefix.is_empty() && prefix != namespace {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            Code::NamespaceNotFound,
            format!(
                "namespace \"{}\" does not exist",
                prefix.join(delimiter.unwrap_or(DEFAULT_DELIMITER))
            ),
        )
        .with_detail(format!(
            "Materialized views live in namespace \"{}\".",
            namespace.join(DEFAULT_DELIMITER)
        )));
    }
    Ok(name.clone())
}

/// A namespace identifier (for listing): the configured namespace, or the
/// root (the delimiter alone).
pub fn resolve_namespace(
    id: &str,
    delimiter: Option<&str>,
    namespace: &[String],
) -> Result<(), ApiError> {
    let delimiter_text = delimiter.unwrap_or(DEFAULT_DELIMITER);
    if id == delimiter_text {
        return Ok(());
    }
    let parts = components(id, delimiter)?;
    if parts != namespace {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            Code::NamespaceNotFound,
            format!("namespace \"{id}\" does not exist"),
        )
        .with_detail(format!(
            "Materialized views live in namespace \"{}\".",
            namespace.join(DEFAULT_DELIMITER)
        )));
    }
    Ok(())
}

/// A request body's `id` (the spec's identifier path, namespace parts then
/// the table name) must name the same view as the route: either the name
/// alone or the configured namespace followed by it, compared part by part.
pub fn check_body_id(body: &[String], name: &str, namespace: &[String]) -> Result<(), ApiError> {
    let same = match body.split_last() {
        Some((last, prefix)) => last == name && (prefix.is_empty() || prefix == namespace),
        None => false,
    };
    if same {
        return Ok(());
    }
    let mut expected = namespace.to_vec();
    expected.push(name.to_string());
    Err(ApiError::invalid(format!(
        "the body's id {body:?} does not name the view of the path"
    ))
    .with_detail(format!("The path names {expected:?}.")))
}

fn components(id: &str, delimiter: Option<&str>) -> Result<Vec<String>, ApiError> {
    let delimiter = delimiter.unwrap_or(DEFAULT_DELIMITER);
    if delimiter.is_empty() {
        return Err(ApiError::invalid("the delimiter must not be empty"));
    }
    let parts: Vec<String> = id.split(delimiter).map(str::to_string).collect();
    if parts.iter().any(String::is_empty) {
        return Err(
            ApiError::invalid(format!("invalid identifier \"{id}\"")).with_detail(format!(
                "Components are separated by \"{delimiter}\" and none may be empty."
            )),
        );
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        let ns = vec!["micromegas".to_string()];
        assert_eq!(resolve_id("errors", None, &ns).unwrap(), "errors");
        assert_eq!(
            resolve_id("micromegas$errors", None, &ns).unwrap(),
            "errors"
        );
        assert_eq!(
            resolve_id("micromegas.errors", Some("."), &ns).unwrap(),
            "errors"
        );
        assert_eq!(
            resolve_id("other$errors", None, &ns).unwrap_err().code,
            Code::NamespaceNotFound
        );
        assert_eq!(
            resolve_id("a$b$errors", None, &ns).unwrap_err().code,
            Code::NamespaceNotFound
        );
        assert_eq!(
            resolve_id("$errors", None, &ns).unwrap_err().code,
            Code::InvalidInput
        );
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_body_id(&path(&["errors"]), "errors", &ns).is_ok());
        assert!(check_body_id(&path(&["micromegas", "errors"]), "errors", &ns).is_ok());
        for wrong in [
            &[][..],
            &["other", "errors"],
            &["micromegas", "x", "errors"],
            &["warnings"],
        ] {
            assert_eq!(
                check_body_id(&path(wrong), "errors", &ns).unwrap_err().code,
                Code::InvalidInput,
                "{wrong:?}"
            );
        }
        assert!(resolve_namespace("$", None, &ns).is_ok());
        assert!(resolve_namespace("micromegas", None, &ns).is_ok());
        assert_eq!(
            resolve_namespace("nope", None, &ns).unwrap_err().code,
            Code::NamespaceNotFound
        );
    }
}
