//! The JSON shapes of the `/v1` API (requests and responses), shared by
//! the REST routes, the MCP tools and the OpenAPI document.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// One message to append.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageIn {
    /// What was said (non-empty).
    pub content: String,
    /// Who said it (`user`, `assistant`, a name); default `user`.
    #[serde(default)]
    pub role: Option<String>,
    /// The conversation or session it belongs to; default `default`.
    #[serde(default)]
    pub session: Option<String>,
    /// When it was said: ISO 8601 (`2023-05-07T10:00:00Z`, `2023-05-07`)
    /// or LoCoMo's `1:56 pm on 8 May, 2023`; years 0–9999.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// Your own id for the message; a message with an id and text already
    /// stored for the user is skipped, so a retried append stores nothing
    /// twice.
    #[serde(default)]
    pub id: Option<String>,
}

/// A batch of messages for one user.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendRequest {
    /// The messages, in the order they were said (1 to 1,000).
    #[schema(min_items = 1, max_items = 1000)]
    pub messages: Vec<MessageIn>,
}

/// What an append stored; ingestion continues in the background.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct AppendResponse {
    /// The ingest job (`GET /v1/jobs/{id}`); absent when nothing new was
    /// stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<i64>,
    /// Store ids of the messages stored, in order.
    pub message_ids: Vec<i64>,
    /// Messages skipped as already stored (same id and text).
    pub skipped: usize,
}

/// An ingest job's state.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Job {
    /// Job id.
    pub id: i64,
    /// The user whose messages it processes.
    pub user_id: String,
    /// `queued`, `running`, `done` or `failed`.
    pub state: String,
    /// Messages the append stored.
    pub messages: i64,
    /// Messages processed so far in the current run (while running).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processed: Option<usize>,
    /// Messages the current run has to process (while running).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<usize>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it was queued (Unix seconds).
    pub created_at: i64,
    /// When it ended (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
}

/// A search over one user's memories.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// What to look for (non-empty, at most 8 KiB).
    #[schema(min_length = 1, pattern = r"\S")]
    pub query: String,
    /// How many memories (1 to 1,000; default 10). Not with `budget`.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    pub k: Option<usize>,
    /// Instead of `k`: as many memories, best first, as fit in this many
    /// tokens (o200k_base) as the pipeline renders them (1 to 131,072).
    #[serde(default)]
    pub budget: Option<usize>,
    /// Only memories said at or after this time (ISO 8601).
    #[serde(default)]
    pub from: Option<String>,
    /// Only memories said at or before this time (ISO 8601).
    #[serde(default)]
    pub to: Option<String>,
    /// Which of the server's pipelines to search (default: the first).
    #[serde(default)]
    pub pipeline: Option<String>,
}

/// A source message of a memory (its provenance).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct SourceMessage {
    /// Store id of the message (erase it with `DELETE …/messages/{id}`).
    pub id: i64,
    /// Your id for it, if you gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ref_id: Option<String>,
    /// Session.
    pub session: String,
    /// Who said it.
    pub role: String,
    /// What was said.
    pub content: String,
    /// When (ISO 8601, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// A memory item.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct MemoryOut {
    /// Memory id.
    pub id: i64,
    /// Its text.
    pub text: String,
    /// Its kind (`turn`, `summary`, `episode`, `fact`, …; pipeline-defined).
    pub kind: String,
    /// The pipeline that made it.
    pub pipeline: String,
    /// Similarity to the query (searches only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    /// When its source was said (ISO 8601, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub said_at: Option<String>,
    /// The time its content refers to (ISO 8601, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refers_to: Option<String>,
    /// Store ids of its source messages.
    pub source_ids: Vec<i64>,
    /// The source messages themselves (get only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<SourceMessage>>,
    /// The memory it was derived from, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<i64>,
    /// Whether it was forgotten (get only; forgotten memories keep their
    /// history until erased).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forgotten: Option<bool>,
    /// When it was made (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<i64>,
}

/// Search results, best first.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct SearchResponse {
    /// The memories.
    pub results: Vec<MemoryOut>,
    /// With `budget`: tokens the packed memories take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
}

/// A page of memories.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct MemoryList {
    /// The memories, oldest first.
    pub results: Vec<MemoryOut>,
}

/// Paging and filters of a memory listing.
#[derive(Debug, Clone, Deserialize, Serialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// At most this many (1 to 1,000; default 100).
    #[serde(default)]
    #[param(minimum = 1, maximum = 1000)]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Skip this many first.
    #[serde(default)]
    pub offset: Option<usize>,
    /// Only this kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// Which pipeline (default: the first).
    #[serde(default)]
    pub pipeline: Option<String>,
}

/// A correction of a memory's text.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrectRequest {
    /// The new text (non-empty); the memory keeps its id and provenance.
    pub text: String,
}

/// A change in a memory's history.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct HistoryEntry {
    /// `add`, `correct` or `forget`.
    pub event: String,
    /// Text before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_text: Option<String>,
    /// Text after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_text: Option<String>,
    /// When (Unix seconds).
    pub at: i64,
}

/// A memory's history, oldest first.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct HistoryResponse {
    /// Memory id.
    pub id: i64,
    /// The changes.
    pub history: Vec<HistoryEntry>,
}

/// A question for which to compose a prompt context.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextRequest {
    /// The question.
    pub question: String,
    /// Token budget of the whole prompt (64 to 131,072; default 2,000).
    #[serde(default)]
    pub budget: Option<usize>,
    /// Which pipeline (default: the first).
    #[serde(default)]
    pub pipeline: Option<String>,
}

/// A composed prompt: what `dentate memory ask` prints.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ContextResponse {
    /// The prompt.
    pub prompt: String,
    /// Its tokens (o200k_base).
    pub tokens: usize,
    /// The memories it includes, best first.
    pub included: Vec<MemoryOut>,
    /// Retrieved memories dropped to fit the budget.
    pub trimmed: usize,
}

/// What an erasure removed.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct EraseReceipt {
    /// Messages removed (store ids).
    pub messages: Vec<i64>,
    /// Memories removed (ids), forgotten ones included.
    pub memories: Vec<i64>,
    /// Triples of the semantic graph removed.
    pub triples: usize,
    /// Derivation links removed.
    pub derivations: usize,
    /// History entries removed.
    pub history: usize,
    /// Pipeline state entries removed (`pipeline/key`).
    pub state: Vec<String>,
    /// Index files removed.
    pub files: Vec<String>,
    /// Pipelines whose memory of the user was rebuilt from the remaining
    /// messages (their state summarised the erased one).
    pub rebuilt: Vec<String>,
    /// Ingest jobs of the user cancelled.
    pub jobs: usize,
}

/// A user of the tenant.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct UserOut {
    /// The user's id.
    pub user_id: String,
    /// When it was made (Unix seconds).
    pub created_at: i64,
    /// Messages stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<i64>,
}

/// A user to create.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    /// The user's id: 1–256 bytes of printable text.
    pub user_id: String,
}

/// The tenant's users.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct UserList {
    /// Users, oldest first.
    pub users: Vec<UserOut>,
}

/// Paging of a listing.
#[derive(Debug, Clone, Deserialize, Serialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// At most this many (1 to 1,000; default 100).
    #[serde(default)]
    #[param(minimum = 1, maximum = 1000)]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Skip this many first.
    #[serde(default)]
    pub offset: Option<usize>,
}

/// A page of a user's source messages.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct MessageList {
    /// Messages, oldest first.
    pub messages: Vec<SourceMessage>,
}

/// Server health.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `shutting_down`.
    pub status: String,
    /// Server version.
    pub version: String,
    /// Pipelines served.
    pub pipelines: Vec<String>,
    /// The embedder.
    pub embedder: String,
    /// Ingest jobs waiting.
    pub queue_depth: usize,
}

/// The error body of every failed request.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// An error: a stable code and a readable reason.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// `bad_request`, `unauthorized`, `forbidden`, `not_found`,
    /// `payload_too_large`, `queue_full`, `upstream_failed`, `unavailable`
    /// or `internal`.
    pub code: String,
    /// What was wrong.
    pub message: String,
}
