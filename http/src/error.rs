//! The one place a daemon error becomes a status code and a `{"detail": ...}` body.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use svc_daemon::{Error, ErrorKind};

/// Which endpoint answers, for the statuses spec 1 sets per endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Endpoint {
    /// Any endpoint without its own rule.
    #[default]
    Other,
    /// The intake catalogue: no results is 400 (spec 1, endpoint 5).
    Intake,
}

/// An error on its way to the client.
#[derive(Debug)]
pub(crate) struct ApiError {
    error: Error,
    endpoint: Endpoint,
}

impl ApiError {
    /// Marks the error as coming from `endpoint`.
    pub(crate) fn at(mut self, endpoint: Endpoint) -> Self {
        self.endpoint = endpoint;
        self
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        ApiError {
            error,
            endpoint: Endpoint::Other,
        }
    }
}

/// An error response with a detail.
pub(crate) fn detail(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "detail": message.into() }))).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match (self.error.kind(), self.endpoint) {
            (ErrorKind::Invalid, _) => StatusCode::UNPROCESSABLE_ENTITY,
            (ErrorKind::Malformed, _) => StatusCode::BAD_REQUEST,
            (ErrorKind::NoResults, Endpoint::Intake) => StatusCode::BAD_REQUEST,
            (ErrorKind::NoResults, Endpoint::Other) => StatusCode::NOT_FOUND,
            (ErrorKind::TooLarge, _) => StatusCode::PAYLOAD_TOO_LARGE,
            (ErrorKind::Unauthenticated, _) => StatusCode::UNAUTHORIZED,
            (ErrorKind::Forbidden, _) => StatusCode::FORBIDDEN,
            (ErrorKind::NotFound, _) => StatusCode::NOT_FOUND,
            (ErrorKind::Conflict, _) => StatusCode::CONFLICT,
            (ErrorKind::Unavailable, _) => StatusCode::SERVICE_UNAVAILABLE,
            (ErrorKind::Internal, _) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self.error, "request failed");
            return detail(status, "Internal server error.");
        }
        let mut response = detail(status, self.error.to_string());
        if status == StatusCode::SERVICE_UNAVAILABLE {
            let retry = crate::blocking::SLOT_WAIT.as_secs().max(1).to_string();
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&retry).expect("digits are a header value"),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
