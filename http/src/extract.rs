//! Our own extractors, so that malformed input is rejected with our error body.

use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;

use crate::error::{ApiError, RequestError};

/// A request body as bytes; a body that is too large or cannot be read gets our error body.
pub(crate) struct RawBody(pub(crate) bytes::Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        bytes::Bytes::from_request(request, state)
            .await
            .map(RawBody)
            .map_err(|e| match e {
                BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
                    RequestError::BodyTooLarge.into()
                }
                other => RequestError::BodyUnreadable {
                    reason: other.body_text(),
                }
                .into(),
            })
    }
}

/// The path's parameters; a path that cannot be read (not UTF-8 after percent-decoding) gets
/// our error body.
pub(crate) struct PathParams<T>(pub(crate) T);

impl<S, T> FromRequestParts<S> for PathParams<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(params)| PathParams(params))
            .map_err(|e| {
                RequestError::PathUnreadable {
                    reason: e.body_text(),
                }
                .into()
            })
    }
}

/// Longest query string accepted; longer ones are refused before parsing.
const MAX_QUERY_BYTES: usize = 32 * 1024;

/// The query string as ordered `(key, value)` pairs, percent-decoded, `+` as space, keys and
/// values required to be UTF-8.
#[derive(Debug, Default)]
pub(crate) struct QueryPairs(pub(crate) Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let Some(query) = parts.uri.query() else {
            return Ok(QueryPairs::default());
        };
        if query.len() > MAX_QUERY_BYTES {
            return Err(RequestError::QueryTooLong {
                length: query.len(),
                limit: MAX_QUERY_BYTES,
            }
            .into());
        }
        Ok(QueryPairs(parse_pairs(query)?))
    }
}

fn decode(text: &str) -> Result<String, RequestError> {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| RequestError::QueryNotUtf8 {
            part: text.to_string(),
        })
}

/// Splits and decodes a raw query string.
pub(crate) fn parse_pairs(query: &str) -> Result<Vec<(String, String)>, RequestError> {
    query
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            Ok((decode(key)?, decode(value)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_keep_order_and_repeats() {
        let pairs = parse_pairs("a=1&b=x+y&a=%2Fp%2A&flag").unwrap();
        assert_eq!(
            pairs,
            [("a", "1"), ("b", "x y"), ("a", "/p*"), ("flag", "")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        );
    }

    #[test]
    fn non_utf8_is_rejected() {
        let err = parse_pairs("project=%FF%FE").unwrap_err();
        assert_eq!(
            err,
            RequestError::QueryNotUtf8 {
                part: "%FF%FE".into()
            }
        );
        assert!(err.to_string().contains("not valid UTF-8"), "{err}");
    }

    proptest::proptest! {
        /// Any query string splits into pairs that encode back to the same pairs, or is
        /// refused naming the part that is not UTF-8.
        #[test]
        fn query_strings_decode_or_name_the_bad_part(
            query in "([a-z%+=&]|%[0-9A-Fa-f]{2}|%[^0-9A-Fa-f]?|\\PC){0,40}",
        ) {
            match parse_pairs(&query) {
                Ok(pairs) => {
                    let encoded: String = form_urlencoded::Serializer::new(String::new())
                        .extend_pairs(&pairs)
                        .finish();
                    proptest::prop_assert_eq!(parse_pairs(&encoded), Ok(pairs));
                }
                Err(e) => proptest::prop_assert!(
                    matches!(&e, RequestError::QueryNotUtf8 { part } if query.contains(part.as_str())),
                    "{}", e
                ),
            }
        }
    }
}
