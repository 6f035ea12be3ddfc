//! Request extractors whose rejections are [`ServeError`]s, and the one
//! error response shape every route answers with.

use crate::error::ServeError;
use crate::model::{ErrorBody, ErrorDetail};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Largest request body.
pub const MAX_BODY: usize = 4 * 1024 * 1024;

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            log::error!("{}: {self}", self.code());
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code().to_string(),
                message: self.to_string(),
            },
        };
        let mut r = (status, axum::Json(body)).into_response();
        match &self {
            ServeError::QueueFull { retry_after, .. } => {
                if let Ok(v) = HeaderValue::from_str(&retry_after.to_string()) {
                    r.headers_mut().insert(header::RETRY_AFTER, v);
                }
            }
            ServeError::Unauthorized(_) => {
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        r
    }
}

/// A JSON body whose rejections are [`ServeError`]s.
#[derive(Debug, Clone)]
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ServeError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Every request body is a JSON object; serde's derived structs
        // would also take a positional array (`["q", 3]`), which the
        // document does not allow.
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_BODY)
            .await
            .map_err(|_| ServeError::TooLarge(format!("the body is over {MAX_BODY} bytes")))?;
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            return Err(ServeError::BadRequest("the body must be a JSON object".into()));
        }
        let req = Request::from_parts(parts, axum::body::Body::from(bytes));
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(e) => Err(json_rejection(e)),
        }
    }
}

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

fn json_rejection(e: JsonRejection) -> ServeError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ServeError::TooLarge(format!("the body is over {MAX_BODY} bytes"));
    }
    match e {
        JsonRejection::MissingJsonContentType(_) => {
            ServeError::BadRequest("the body must be JSON (Content-Type: application/json)".into())
        }
        other => ServeError::BadRequest(other.body_text()),
    }
}

/// Query parameters whose rejections are [`ServeError`]s.
#[derive(Debug, Clone)]
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ServeError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e: QueryRejection| ServeError::BadRequest(e.body_text()))
    }
}

/// Path parameters whose rejections are [`ServeError`]s.
#[derive(Debug, Clone)]
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ServeError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e: PathRejection| ServeError::BadRequest(e.body_text()))
    }
}
