//! The MCP server (rmcp): the same tools over stdio (`dentate mcp`) and
//! over streamable HTTP at `/mcp` of `dentate serve`.
//!
//! Over HTTP the caller is who its key says (the server's authentication
//! runs before MCP and hands the principal on in the request's
//! extensions); over stdio the process is the user's own and acts for one
//! tenant with full rights.

use crate::engine::Engine;
use crate::error::ServeError;
use crate::model::{MessageIn, SearchRequest};
use crate::registry::Principal;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::schemars::{self, JsonSchema};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

const INSTRUCTIONS: &str = "Long-term memory for conversations. Store what the user says with \
`add_memory` (one fact or message) or `add_messages` (a batch of a conversation), keyed by a \
user_id you choose and keep stable for that person. Before answering a question that may depend \
on earlier conversations, call `search_memories` with the question and the same user_id; each \
result carries an id, its text, a score and the ids of the messages it came from. Use \
`get_memory` for a memory's source messages, `update_memory` to correct one that is wrong and \
`delete_memory` to forget one the user asks you to forget.";

/// One message to store.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct McpMessage {
    /// What was said.
    pub content: String,
    /// Who said it: `user`, `assistant` or a name (default `user`).
    #[serde(default)]
    pub role: Option<String>,
    /// When it was said, ISO 8601 (e.g. `2024-03-01T14:00:00Z`), if known.
    #[serde(default)]
    pub timestamp: Option<String>,
}

/// Arguments of `add_messages`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddMessagesArgs {
    /// The person these messages belong to (a stable id you choose).
    pub user_id: String,
    /// The messages, oldest first.
    pub messages: Vec<McpMessage>,
}

/// Arguments of `add_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddMemoryArgs {
    /// The person this memory belongs to.
    pub user_id: String,
    /// The fact or message to remember, in one or two sentences.
    pub text: String,
}

/// Arguments of `search_memories`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// The person whose memories to search.
    pub user_id: String,
    /// What to look for: usually the question being answered.
    pub query: String,
    /// How many memories to return (default 5, at most 100).
    #[serde(default)]
    pub k: Option<usize>,
}

/// Arguments naming one memory.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct MemoryIdArgs {
    /// The memory's id, as search returned it.
    pub memory_id: i64,
}

/// Arguments of `update_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct UpdateArgs {
    /// The memory's id.
    pub memory_id: i64,
    /// Its corrected text.
    pub text: String,
}

/// The MCP tool server over an [`Engine`].
#[derive(Clone)]
pub struct MemoryTools {
    engine: Arc<Engine>,
    /// The caller over stdio (over HTTP the request's key decides).
    local: Option<Principal>,
}

fn json(v: &impl serde::Serialize) -> Result<CallToolResult, McpError> {
    let text = serde_json::to_string_pretty(v).map_err(|e| McpError::internal_error(e.to_string(), None))?;
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

/// A service error as a tool result the agent reads (`isError: true`).
fn failed(e: ServeError) -> Result<CallToolResult, McpError> {
    Ok(CallToolResult::error(vec![ContentBlock::text(format!(
        "{}: {e}",
        e.code()
    ))]))
}

fn answer<T: serde::Serialize>(r: Result<T, ServeError>) -> Result<CallToolResult, McpError> {
    match r {
        Ok(v) => json(&v),
        Err(e) => failed(e),
    }
}

#[tool_router]
impl MemoryTools {
    /// Tools acting for the HTTP caller (`local = None`) or, over stdio,
    /// for `local`.
    pub fn new(engine: Arc<Engine>, local: Option<Principal>) -> Self {
        MemoryTools { engine, local }
    }

    fn principal(&self, ctx: &RequestContext<RoleServer>) -> Result<Principal, ServeError> {
        if let Some(p) = &self.local {
            return Ok(p.clone());
        }
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned()
            .ok_or_else(|| ServeError::Unauthorized("no caller identity on this request".into()))
    }

    #[tool(
        description = "Store a batch of conversation messages for a user. They are saved at once and turned into searchable memories in the background (usually within a second). Returns the stored message ids and an ingest job id."
    )]
    async fn add_messages(
        &self,
        Parameters(a): Parameters<AddMessagesArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let r = async {
            let p = self.principal(&ctx)?;
            let msgs = a
                .messages
                .into_iter()
                .map(|m| MessageIn {
                    content: m.content,
                    role: m.role,
                    session: None,
                    timestamp: m.timestamp,
                    id: None,
                })
                .collect();
            self.engine.append(&p, &a.user_id, msgs).await
        }
        .await;
        answer(r)
    }

    #[tool(
        description = "Remember one fact or message about a user (e.g. \"Alice is allergic to peanuts\"). Waits until it is searchable and returns the memories made from it, with their ids."
    )]
    async fn add_memory(
        &self,
        Parameters(a): Parameters<AddMemoryArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let r = async {
            let p = self.principal(&ctx)?;
            let msg = MessageIn {
                content: a.text,
                role: None,
                session: None,
                timestamp: None,
                id: None,
            };
            let added = self.engine.append(&p, &a.user_id, vec![msg]).await?;
            if let Some(j) = added.job_id {
                self.engine.wait_job(j, Duration::from_secs(30)).await?;
            }
            self.engine.memories_from(&p, &a.user_id, added.message_ids).await
        }
        .await;
        answer(r)
    }

    #[tool(
        description = "Search a user's memories for what is relevant to a query (usually the question you are answering). Returns the best memories first, each with id, text, score, when it was said and the ids of its source messages."
    )]
    async fn search_memories(
        &self,
        Parameters(a): Parameters<SearchArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let r = async {
            let p = self.principal(&ctx)?;
            let k = a.k.unwrap_or(5);
            if !(1..=100).contains(&k) {
                return Err(ServeError::BadRequest(format!("k is {k}; use 1 to 100")));
            }
            let q = SearchRequest {
                query: a.query,
                k: Some(k),
                budget: None,
                from: None,
                to: None,
                pipeline: None,
            };
            self.engine.search(&p, &a.user_id, q).await
        }
        .await;
        answer(r)
    }

    #[tool(description = "Get one memory by id, with the messages it was made from (its provenance).")]
    async fn get_memory(
        &self,
        Parameters(a): Parameters<MemoryIdArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let r = async {
            let p = self.principal(&ctx)?;
            self.engine.get(&p, None, a.memory_id).await
        }
        .await;
        answer(r)
    }

    #[tool(
        description = "Correct a memory whose text is wrong or out of date. It keeps its id and provenance; the old text stays in its history."
    )]
    async fn update_memory(
        &self,
        Parameters(a): Parameters<UpdateArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let r = async {
            let p = self.principal(&ctx)?;
            self.engine.correct(&p, None, a.memory_id, a.text).await
        }
        .await;
        answer(r)
    }

    #[tool(description = "Forget a memory (when the user asks you to, or it is wrong and cannot be corrected).")]
    async fn delete_memory(
        &self,
        Parameters(a): Parameters<MemoryIdArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let r = async {
            let p = self.principal(&ctx)?;
            self.engine.forget(&p, None, a.memory_id).await?;
            Ok(serde_json::json!({"forgotten": a.memory_id}))
        }
        .await;
        answer(r)
    }

    #[tool(description = "List the users that have memories here (their user_id values).")]
    async fn list_users(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, McpError> {
        let r = self
            .principal(&ctx)
            .and_then(|p| self.engine.list_users(&p, Some(crate::engine::MAX_PAGE), None));
        answer(r)
    }
}

#[tool_handler]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("dentate", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// The `/mcp` service of the HTTP server (streamable HTTP, sessions kept
/// in memory). Host checking is off: the server's own authentication
/// decides who may call.
pub fn http_service(engine: Arc<Engine>) -> StreamableHttpService<MemoryTools, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(MemoryTools::new(engine.clone(), None)),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Serves the tools over stdio for `principal` until the client closes.
pub async fn serve_stdio(engine: Arc<Engine>, principal: Principal) -> Result<(), ServeError> {
    let service = MemoryTools::new(engine, Some(principal))
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Internal(format!("MCP over stdio: {e}")))?;
    service
        .waiting()
        .await
        .map_err(|e| ServeError::Internal(format!("MCP over stdio: {e}")))?;
    Ok(())
}
