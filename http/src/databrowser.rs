//! Databrowser routes: overview, data-search, metadata-search, intake and static STAC
//! catalogues. Handlers extract, call the daemon's databrowser, and shape the answer.

use std::io::Write;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use svc_daemon::{Daemon, ExpensiveSlot, IntakeCatalogue, Search, StaticLinks, VERSION};
use tokio::sync::mpsc;

use crate::AppState;
use crate::auth::MaybeAuthenticated;
use crate::error::{ApiError, Endpoint};
use crate::extract::{PathParams, QueryPairs};

/// Locations sent per chunk of a data-search stream.
const LOCATIONS_PER_CHUNK: usize = 8_192;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/databrowser/overview", get(overview))
        .route(
            "/databrowser/data-search/{flavour}/{uniq_key}",
            get(data_search),
        )
        .route(
            "/databrowser/metadata-search/{flavour}/{uniq_key}",
            get(metadata_search),
        )
        .route(
            "/databrowser/intake-catalogue/{flavour}/{uniq_key}",
            get(intake_catalogue),
        )
        .route(
            "/databrowser/stac-catalogue/{flavour}/{uniq_key}",
            get(stac_catalogue),
        )
}

async fn overview(State(state): State<AppState>, caller: MaybeAuthenticated) -> Json<Value> {
    let flavours = state.daemon.flavours().visible(caller.user());
    let attributes: Map<String, Value> = flavours
        .iter()
        .map(|f| (f.name.clone(), json!(f.attributes())))
        .collect();
    Json(json!({
        "flavours": flavours.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
        "attributes": attributes,
    }))
}

/// Validates a request off the runtime (compiling many wildcards is real work).
async fn prepare(
    state: &AppState,
    caller: &MaybeAuthenticated,
    flavour: &str,
    uniq_key: &str,
    pairs: Vec<(String, String)>,
) -> Result<Search, ApiError> {
    let (flavour, uniq_key) = (flavour.to_string(), uniq_key.to_string());
    let user = caller.user().map(str::to_string);
    state
        .daemon
        .run(move |daemon| {
            daemon
                .databrowser()
                .prepare(&flavour, &uniq_key, user.as_deref(), &pairs)
        })
        .await
        .map_err(ApiError::from)
}

/// The sending end of a streamed body: parts, or the error that ends it.
type BodyTx = mpsc::Sender<std::io::Result<Bytes>>;

/// A body that blocking work produces through a channel, holding an expensive-work slot
/// until the body is produced.
fn stream_body(
    state: &AppState,
    slot: ExpensiveSlot,
    produce: impl FnOnce(&Daemon, BodyTx) + Send + 'static,
) -> Body {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
    state
        .daemon
        .produce(slot, move |daemon| produce(daemon, tx));
    Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Ends a streamed body with an error: logged with its causes, and sent into the body so the
/// server aborts the response instead of ending it as if it were complete (the status line
/// is gone by then; a cut connection is what tells the client the answer is not whole).
fn fail_stream(tx: &BodyTx, what: &str, error: &svc_daemon::Error) {
    if tx.is_closed() {
        // The client went away: nothing failed on our side.
        tracing::debug!(error = %error.chain(), "{what} stopped: the client went away");
        return;
    }
    tracing::error!(error = %error.chain(), "{what} failed while streaming");
    let _ = tx.blocking_send(Err(std::io::Error::other(error.to_string())));
}

async fn data_search(
    State(state): State<AppState>,
    PathParams((flavour, uniq_key)): PathParams<(String, String)>,
    caller: MaybeAuthenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<Response, ApiError> {
    let search = prepare(&state, &caller, &flavour, &uniq_key, pairs).await?;
    let slot = state.daemon.expensive_slot().await?;
    let uri = uniq_key == "uri";
    let body = stream_body(&state, slot, move |daemon, tx| {
        let mut cursor = daemon.databrowser().locations(&search);
        loop {
            let mut chunk = Vec::with_capacity(LOCATIONS_PER_CHUNK * 128);
            let n = cursor.next_batch(LOCATIONS_PER_CHUNK, |_, path, uri_value| {
                chunk.extend_from_slice(if uri { uri_value } else { path }.as_bytes());
                chunk.push(b'\n');
            });
            if n == 0 || tx.blocking_send(Ok(Bytes::from(chunk))).is_err() {
                break;
            }
        }
    });
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response())
}

async fn metadata_search(
    State(state): State<AppState>,
    PathParams((flavour, uniq_key)): PathParams<(String, String)>,
    caller: MaybeAuthenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let search = prepare(&state, &caller, &flavour, &uniq_key, pairs).await?;
    let result = state
        .daemon
        .run_expensive(move |daemon| daemon.databrowser().metadata(&search))
        .await?;
    let facets: Map<String, Value> = result
        .facets
        .into_iter()
        .map(|(name, counts)| {
            let flat: Vec<Value> = counts
                .into_iter()
                .flat_map(|(term, n)| [Value::String(term), Value::String(n.to_string())])
                .collect();
            (name, Value::Array(flat))
        })
        .collect();
    let mapping: Map<String, Value> = result
        .facet_mapping
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    Ok(Json(json!({
        "total_count": result.total_count,
        "facets": facets,
        "facet_mapping": mapping,
        "primary_facets": result.primary_facets,
    })))
}

async fn intake_catalogue(
    State(state): State<AppState>,
    PathParams((flavour, uniq_key)): PathParams<(String, String)>,
    caller: MaybeAuthenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<Response, ApiError> {
    let search = prepare(&state, &caller, &flavour, &uniq_key, pairs)
        .await
        .map_err(|e| e.at(Endpoint::Intake))?;
    let slot = state.daemon.expensive_slot().await?;
    let (catalogue, slot) = state
        .daemon
        .run_in_slot(slot, move |daemon| {
            daemon.databrowser().intake(&search, VERSION, None)
        })
        .await
        .map_err(|e| ApiError::from(e).at(Endpoint::Intake))?;
    Ok(intake_download(&state, slot, catalogue, &uniq_key))
}

/// An intake-esm catalogue streamed as a JSON download, named after its location column.
pub(crate) fn intake_download(
    state: &AppState,
    slot: ExpensiveSlot,
    mut catalogue: IntakeCatalogue,
    uniq_key: &str,
) -> Response {
    let body = stream_body(state, slot, move |_, tx| {
        loop {
            match catalogue.next_chunk() {
                Ok(Some(chunk)) => {
                    if tx.blocking_send(Ok(Bytes::from(chunk))).is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    fail_stream(&tx, "an intake catalogue", &e);
                    break;
                }
            }
        }
    });
    let name = format!("IntakeEsmCatalogue_{}_{uniq_key}.json", short_id());
    download("application/json", &name, body)
}

async fn stac_catalogue(
    State(state): State<AppState>,
    PathParams((flavour, uniq_key)): PathParams<(String, String)>,
    caller: MaybeAuthenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<Response, ApiError> {
    let search = prepare(&state, &caller, &flavour, &uniq_key, pairs).await?;
    let links = StaticLinks {
        api_base: state.api_base.clone(),
    };
    let slot = state.daemon.expensive_slot().await?;
    let (catalogue, slot) = state
        .daemon
        .run_in_slot(slot, move |daemon| {
            daemon.databrowser().static_catalogue(&search, links)
        })
        .await?;
    let name = catalogue.file_name.clone();
    let body = stream_body(&state, slot, move |_, tx| {
        let writer = ChannelWriter {
            tx: tx.clone(),
            buffer: Vec::new(),
        };
        if let Err(e) = catalogue.write_to(writer) {
            fail_stream(&tx, "a static STAC catalogue", &e);
        }
    });
    Ok(download("application/zip", &name, body))
}

/// A streamed file download with its media type and suggested file name.
fn download(content_type: &'static str, name: &str, body: Body) -> Response {
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
        .expect("generated file names are ASCII");
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (header::CONTENT_DISPOSITION, disposition),
    ];
    (headers, body).into_response()
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

/// A blocking writer that sends its bytes to a response body in 64 KiB chunks.
struct ChannelWriter {
    tx: BodyTx,
    buffer: Vec<u8>,
}

const WRITER_CHUNK: usize = 64 * 1024;

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= WRITER_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buffer));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::other("client went away"))
    }
}

impl Drop for ChannelWriter {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}
