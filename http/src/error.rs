//! The one place an error becomes a status code and a `{"detail": ...}` body: the daemon's
//! errors by their [`ErrorKind`] and the endpoint that answers, and the request's own faults
//! ([`RequestError`]) found before the daemon sees it. Internal failures are logged with their
//! whole chain of causes and answered without them.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use svc_daemon::{Error, ErrorKind, Fault};

/// Which endpoint answers, for the statuses spec 1 sets per endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Endpoint {
    /// Any endpoint without its own rule.
    #[default]
    Other,
    /// The intake catalogue: no results is 400 (spec 1, endpoint 5).
    Intake,
    /// The STAC API: a body field of the wrong JSON type is 422 (spec 2, endpoint 15); every
    /// other parameter fault is 400, as DECISIONS sets for malformed `bbox`, `datetime`,
    /// paging tokens, `limit` below 1, unknown parameters and `visible_collections` that
    /// match nothing.
    Stac,
    /// A key of a Zarr store: a malformed key is 400 (spec 2, endpoint 3).
    StoreKey,
    /// Creating a share URL: a `path` that is not a store URL of this service is 400
    /// (DECISIONS); other bad values are 422.
    Share,
}

/// What is wrong with a request before it reaches the daemon.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RequestError {
    /// No route has this path.
    NoRoute,
    /// The route does not answer this method.
    MethodNotAllowed,
    /// The path's parameters cannot be read (not UTF-8 after percent-decoding).
    PathUnreadable {
        /// What went wrong, as the HTTP layer tells it.
        reason: String,
    },
    /// The body is longer than the route accepts.
    BodyTooLarge,
    /// The body could not be read.
    BodyUnreadable {
        /// What went wrong, as the HTTP layer tells it.
        reason: String,
    },
    /// The query string is longer than any accepted.
    QueryTooLong {
        /// Its length in bytes.
        length: usize,
        /// The longest accepted.
        limit: usize,
    },
    /// A part of the query string is not UTF-8 after percent-decoding.
    QueryNotUtf8 {
        /// The part as sent.
        part: String,
    },
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::NoRoute => write!(f, "Not Found"),
            RequestError::MethodNotAllowed => write!(f, "Method Not Allowed"),
            RequestError::PathUnreadable { reason } => write!(f, "Request path: {reason}."),
            RequestError::BodyTooLarge => write!(f, "Request body: length limit exceeded."),
            RequestError::BodyUnreadable { reason } => write!(f, "Request body: {reason}."),
            RequestError::QueryTooLong { length, limit } => write!(
                f,
                "Query string of {length} bytes exceeds the limit of {limit} bytes."
            ),
            RequestError::QueryNotUtf8 { part } => write!(
                f,
                "Query parameter {part:?} is not valid UTF-8 after percent-decoding."
            ),
        }
    }
}

/// An error on its way to the client.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// The daemon refused or failed the request.
    Daemon {
        /// The daemon's error.
        error: Error,
        /// Which endpoint answers.
        endpoint: Endpoint,
    },
    /// The request was refused before the daemon saw it.
    Request(RequestError),
}

impl ApiError {
    /// Marks the error as coming from `endpoint`.
    pub(crate) fn at(self, at: Endpoint) -> Self {
        match self {
            ApiError::Daemon { error, .. } => ApiError::Daemon {
                error,
                endpoint: at,
            },
            request => request,
        }
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        ApiError::Daemon {
            error,
            endpoint: Endpoint::Other,
        }
    }
}

impl From<RequestError> for ApiError {
    fn from(error: RequestError) -> Self {
        ApiError::Request(error)
    }
}

/// The status of a daemon error at an endpoint.
fn status(error: &Error, endpoint: Endpoint) -> StatusCode {
    match (error.kind(), endpoint) {
        (ErrorKind::Invalid, Endpoint::Stac) if error.fault() != Some(Fault::WrongType) => {
            StatusCode::BAD_REQUEST
        }
        (ErrorKind::Invalid, Endpoint::StoreKey) => StatusCode::BAD_REQUEST,
        (ErrorKind::Invalid, Endpoint::Share) if matches!(error, Error::InvalidParameter { parameter, .. } if parameter == "path") => {
            StatusCode::BAD_REQUEST
        }
        (ErrorKind::Invalid, _) => StatusCode::UNPROCESSABLE_ENTITY,
        (ErrorKind::NoResults, Endpoint::Intake) => StatusCode::BAD_REQUEST,
        (ErrorKind::NoResults, _) => StatusCode::NOT_FOUND,
        (ErrorKind::TooLarge, _) => StatusCode::PAYLOAD_TOO_LARGE,
        (ErrorKind::Unauthenticated, _) => StatusCode::UNAUTHORIZED,
        (ErrorKind::Forbidden, _) => StatusCode::FORBIDDEN,
        (ErrorKind::NotFound, _) => StatusCode::NOT_FOUND,
        (ErrorKind::Conflict, _) => StatusCode::CONFLICT,
        (ErrorKind::Unavailable, _) => StatusCode::SERVICE_UNAVAILABLE,
        (ErrorKind::Internal | ErrorKind::Failed, _) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The status of a request refused before the daemon saw it.
fn request_status(error: &RequestError) -> StatusCode {
    match error {
        RequestError::NoRoute => StatusCode::NOT_FOUND,
        RequestError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        RequestError::PathUnreadable { .. } => StatusCode::BAD_REQUEST,
        RequestError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        RequestError::BodyUnreadable { .. } => StatusCode::BAD_REQUEST,
        RequestError::QueryTooLong { .. } => StatusCode::URI_TOO_LONG,
        RequestError::QueryNotUtf8 { .. } => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// An error response with a detail.
fn detail(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "detail": message }))).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (error, endpoint) = match self {
            ApiError::Request(request) => {
                return detail(request_status(&request), &request.to_string());
            }
            ApiError::Daemon { error, endpoint } => (error, endpoint),
        };
        let status = status(&error, endpoint);
        if error.kind() == ErrorKind::Internal {
            tracing::error!(error = %error.chain(), "request failed");
            return detail(status, "Internal server error.");
        }
        let mut response = detail(status, &error.to_string());
        let headers = response.headers_mut();
        let retry = match error {
            Error::Busy { retry }
            | Error::NotReady { retry }
            | Error::Stopping { retry }
            | Error::Restoring { retry, .. } => Some(retry),
            // A service the daemon needs (an identity provider): it is asked again at most
            // this often.
            Error::Unavailable { .. } => Some(svc_daemon::SERVICE_RETRY),
            _ => None,
        };
        if let Some(retry) = retry {
            let seconds = retry.as_secs().max(1).to_string();
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&seconds).expect("digits are a header value"),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
