//! Databrowser routes: overview, data-search, metadata-search, intake and static STAC
//! catalogues. Handlers extract, call the daemon's databrowser, and shape the answer.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use svc_daemon::{
    Daemon, ExpensiveSlot, IntakeCatalogue, Search, StaticLinks, StreamSlot, VERSION,
};
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

/// The overview, built on the blocking pool: a user's flavours are many and long enough to
/// hold the runtime up.
async fn overview(
    State(state): State<AppState>,
    caller: MaybeAuthenticated,
) -> Result<Json<Value>, ApiError> {
    let user = caller.user().map(str::to_string);
    let overview = state
        .daemon
        .run(move |daemon| {
            let flavours = daemon.flavours().visible(user.as_deref());
            let attributes: Map<String, Value> = flavours
                .iter()
                .map(|f| (f.name.clone(), json!(f.attributes())))
                .collect();
            Ok(json!({
                "flavours": flavours.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
                "attributes": attributes,
            }))
        })
        .await?;
    Ok(Json(overview))
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

/// How long a streamed body waits for its client to take what was sent before: a client
/// that takes nothing for this long has its answer cut. (A client may read slowly: one
/// that hands each path to slow work reads the next only when it is done.)
const STALLED_CLIENT: std::time::Duration = std::time::Duration::from_secs(600);

/// The sending end of a streamed body: parts, or the error that ends it.
#[derive(Clone)]
struct BodyTx {
    parts: mpsc::Sender<std::io::Result<Bytes>>,
    /// The producer's slot of expensive work, given back while it waits for its client
    /// (four clients that never read held every slot, and every search answered 503).
    slot: Arc<Mutex<Option<ExpensiveSlot>>>,
    daemon: Arc<Daemon>,
    /// Set when the body was cut for a client that took nothing for [`STALLED_CLIENT`]: the
    /// body then ends with an error, never as if it were whole.
    cut: Arc<AtomicBool>,
}

/// The client went away, or took nothing for [`STALLED_CLIENT`].
struct Gone;

impl BodyTx {
    /// Sends `part`. When the client has not taken what was sent before, the producer's
    /// slot is given back while it waits, for at most [`STALLED_CLIENT`], and taken again
    /// before it goes on. Called from a producer on the blocking pool, where the runtime's
    /// handle is at hand.
    fn send(&self, part: std::io::Result<Bytes>) -> Result<(), Gone> {
        use mpsc::error::{SendTimeoutError, TrySendError};
        if self.cut.load(Ordering::Acquire) {
            // Cut already: nothing more is sent (a writer flushing as it drops waited again).
            return Err(Gone);
        }
        let part = match self.parts.try_send(part) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Closed(_)) => return Err(Gone),
            Err(TrySendError::Full(part)) => part,
        };
        let given_back = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(given_back);
        let sent = tokio::runtime::Handle::current()
            .block_on(self.parts.send_timeout(part, STALLED_CLIENT));
        match sent {
            Ok(()) => {
                let slot = self.daemon.slot_again();
                *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(slot);
                Ok(())
            }
            Err(SendTimeoutError::Closed(_)) => Err(Gone),
            Err(SendTimeoutError::Timeout(_)) => {
                self.cut.store(true, Ordering::Release);
                tracing::info!(
                    "a streamed answer was cut: its client took nothing for {} s",
                    STALLED_CLIENT.as_secs()
                );
                Err(Gone)
            }
        }
    }

    /// Whether the client went away.
    fn is_closed(&self) -> bool {
        self.parts.is_closed()
    }
}

/// A body that blocking work produces through a channel, holding an expensive-work slot
/// while it produces ([`BodyTx::send`]).
fn stream_body(
    state: &AppState,
    place: StreamSlot,
    slot: ExpensiveSlot,
    produce: impl FnOnce(&Daemon, BodyTx) + Send + 'static,
) -> Body {
    use futures::StreamExt;
    let (parts, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
    let cut = Arc::new(AtomicBool::new(false));
    let daemon = Arc::clone(&state.daemon);
    let cut_too = Arc::clone(&cut);
    state.daemon.produce(place, slot, move |on, slot| {
        let tx = BodyTx {
            parts,
            slot: Arc::new(Mutex::new(Some(slot))),
            daemon,
            cut: cut_too,
        };
        produce(on, tx);
    });
    // Looked at once every part sent was taken and the producer ended.
    let end = futures::stream::once(async move { cut.load(Ordering::Acquire) }).filter_map(
        |cut| async move {
            cut.then(|| {
                Err(std::io::Error::other(
                    "the client took nothing for too long: the answer was cut",
                ))
            })
        },
    );
    Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx).chain(end))
}

/// Ends a streamed body with an error: logged with its causes, and sent into the body so the
/// server aborts the response instead of ending it as if it were complete (the status line
/// is gone by then; a cut connection is what tells the client the answer is not whole).
fn fail_stream(tx: &BodyTx, what: &str, error: &svc_daemon::Error) {
    if tx.is_closed() || tx.cut.load(Ordering::Acquire) {
        // The client went away or stalled: nothing failed on our side.
        tracing::debug!(error = %error.chain(), "{what} stopped: the client went away");
        return;
    }
    tracing::error!(error = %error.chain(), "{what} failed while streaming");
    let _ = tx.send(Err(std::io::Error::other(error.to_string())));
}

async fn data_search(
    State(state): State<AppState>,
    PathParams((flavour, uniq_key)): PathParams<(String, String)>,
    caller: MaybeAuthenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<Response, ApiError> {
    let search = prepare(&state, &caller, &flavour, &uniq_key, pairs).await?;
    let (place, slot) = state.daemon.stream_slots().await?;
    let uri = uniq_key == "uri";
    let body = stream_body(&state, place, slot, move |daemon, tx| {
        let mut cursor = daemon.databrowser().locations(&search);
        loop {
            let mut chunk = Vec::with_capacity(LOCATIONS_PER_CHUNK * 128);
            let n = cursor.next_batch(LOCATIONS_PER_CHUNK, |_, path, uri_value| {
                chunk.extend_from_slice(if uri { uri_value } else { path }.as_bytes());
                chunk.push(b'\n');
            });
            if n == 0 || tx.send(Ok(Bytes::from(chunk))).is_err() {
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
    let (place, slot) = state.daemon.stream_slots().await?;
    let (catalogue, slot) = state
        .daemon
        .run_in_slot(slot, move |daemon| {
            daemon.databrowser().intake(&search, VERSION, None)
        })
        .await
        .map_err(|e| ApiError::from(e).at(Endpoint::Intake))?;
    Ok(intake_download(&state, place, slot, catalogue, &uniq_key))
}

/// An intake-esm catalogue streamed as a JSON download, named after its location column.
pub(crate) fn intake_download(
    state: &AppState,
    place: StreamSlot,
    slot: ExpensiveSlot,
    mut catalogue: IntakeCatalogue,
    uniq_key: &str,
) -> Response {
    let body = stream_body(state, place, slot, move |_, tx| {
        loop {
            match catalogue.next_chunk() {
                Ok(Some(chunk)) => {
                    if tx.send(Ok(Bytes::from(chunk))).is_err() {
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
    let (place, slot) = state.daemon.stream_slots().await?;
    let (catalogue, slot) = state
        .daemon
        .run_in_slot(slot, move |daemon| {
            daemon.databrowser().static_catalogue(&search, links)
        })
        .await?;
    let name = catalogue.file_name.clone();
    let body = stream_body(&state, place, slot, move |_, tx| {
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
            .send(Ok(chunk))
            .map_err(|Gone| std::io::Error::other("the client went away or stalled"))
    }
}

impl Drop for ChannelWriter {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}
