//! The LoCoMo evaluation on a handwritten conversation in the dataset's
//! format, offline and with a scripted judge model.

mod common;

use common::{chat, chat_body, embedder};
use dentate_embed::http::testing::{Reply, ScriptedServer};
use dentate_memory::eval::{self, EvalOptions};
use dentate_memory::{Llm, PipelineKind, locomo};
use std::sync::Arc;

const FIXTURE: &str = r#"[{
  "sample_id": "fixture-1",
  "conversation": {
    "speaker_a": "Ann", "speaker_b": "Bob",
    "session_1_date_time": "9:15 am on 2 March, 2024",
    "session_1": [
      {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey cat called Pixel from the shelter."},
      {"speaker": "Bob", "dia_id": "D1:2", "text": "I am training for the Berlin marathon in September."},
      {"speaker": "Ann", "dia_id": "D1:3", "text": "My sister Clara is moving to Lisbon to work as an architect."}
    ],
    "session_2_date_time": "6:40 pm on 9 March, 2024",
    "session_2": [
      {"speaker": "Bob", "dia_id": "D2:1", "text": "I repaired the blue bicycle my grandfather left me."},
      {"speaker": "Ann", "dia_id": "D2:2", "text": "I started cello lessons at the community music school."},
      {"speaker": "Bob", "dia_id": "D2:3", "text": "The marathon training plan has five runs a week now."}
    ],
    "session_3_date_time": "1:00 pm on 20 March, 2024"
  },
  "qa": [
    {"question": "What is the name of Ann's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
    {"question": "Which city is Clara moving to?", "answer": "Lisbon", "evidence": ["D1:3"], "category": 4},
    {"question": "What is Bob training for and how often does he run?", "answer": "Berlin marathon, five runs a week",
     "evidence": ["D1:2; D2:3"], "category": 1},
    {"question": "When did Ann start cello lessons?", "answer": 2024, "evidence": ["D2:2"], "category": 2},
    {"question": "Is Ann a musician?", "answer": "Likely yes", "evidence": [], "category": 3},
    {"question": "What did Bob paint?", "adversarial_answer": "Not mentioned", "evidence": ["D2:1"], "category": 5}
  ]
}]"#;

fn opts(kind: &str) -> EvalOptions {
    EvalOptions {
        pipeline: PipelineKind::parse(kind).unwrap(),
        ks: vec![1, 2, 5],
        embedder: embedder(),
        pipeline_llm: None,
        judge_llm: None,
        budget: 3500,
        retriever: dentate_memory::Retriever::Dense,
    }
}

#[test]
fn retrieval_metrics_per_category() {
    let ds = locomo::parse(FIXTURE).unwrap();
    for kind in ["rag", "hema"] {
        let dir = tempfile::tempdir().unwrap();
        let out = eval::run(&ds, &opts(kind), dir.path(), &mut |_| {}).unwrap();
        assert_eq!((out.messages, out.questions), (6, 6));
        assert!(out.skipped.contains("date_times_without_session=1"), "{}", out.skipped);
        let r = &out.report;
        let row = |c: u8| r.categories.iter().find(|x| x.category == Some(c)).unwrap();
        // Single-hop facts with distinctive words are found at k = 1.
        assert_eq!(row(4).per_k[0].mean_recall, Some(1.0), "{kind}");
        // The multi-hop question has two evidence turns: at most half at k = 1.
        assert!(row(1).per_k[0].mean_recall.unwrap() <= 0.5);
        assert_eq!(row(1).per_k[2].mean_recall, Some(1.0), "{kind}: both within 5 of 6");
        // The question without evidence is not scored.
        assert_eq!(row(3).scored, 0);
        assert_eq!(r.overall.scored, 5);
        // Context grows with k.
        let t = &r.overall.per_k;
        assert!(t[0].mean_context_tokens < t[2].mean_context_tokens);
        let md = out.to_markdown();
        assert!(md.contains("single-hop") && md.contains("overall"), "{md}");
        assert!(out.to_json()["retrieval"].is_object());
    }
}

#[test]
fn answers_are_generated_and_judged() {
    let ds = locomo::parse(FIXTURE).unwrap();
    // Answer calls (plain text) and judge calls (JSON) alternate; the judge
    // says CORRECT when the generated answer is "Pixel".
    let s = ScriptedServer::start(64, |_, body| {
        let json = body.get("response_format").is_some();
        let prompt = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str());
        let prompt = prompt.unwrap_or_default();
        if !json {
            let a = if prompt.contains("Question: What is the name of Ann's cat?") {
                "Pixel"
            } else {
                "No idea"
            };
            Reply::ok(chat_body(a))
        } else if prompt.contains("Generated answer: Pixel") {
            Reply::ok(chat_body("The same cat. {\"label\": \"CORRECT\"}"))
        } else {
            Reply::ok(chat_body("{\"label\": \"WRONG\"}"))
        }
    })
    .unwrap();
    let llm: Arc<dyn Llm> = Arc::new(chat(&s, 2000, 0));
    let mut o = opts("rag");
    o.judge_llm = Some(llm);
    let dir = tempfile::tempdir().unwrap();
    let out = eval::run(&ds, &o, dir.path(), &mut |_| {}).unwrap();
    let rows = out.judge.unwrap();
    let overall = rows.iter().find(|r| r.category.is_none()).unwrap();
    // Five answerable questions in categories 1–4, one judged CORRECT.
    assert_eq!((overall.judged, overall.correct), (5, 1));
    let adv = rows.iter().find(|r| r.category == Some(5)).unwrap();
    assert_eq!((adv.judged, adv.correct), (1, 0));
    // The answer prompt carried the retrieved memory and the question.
    let reqs = s.requests();
    let first = reqs[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(first.contains("Pixel") && first.contains("Relevant Stories:"));
}

#[test]
fn judge_that_never_labels_is_an_error() {
    let s = ScriptedServer::start(8, |_, _| Reply::ok(chat_body("I think it is fine."))).unwrap();
    let err = eval::judge(&chat(&s, 2000, 0), "q", "gold", "gen").unwrap_err();
    assert!(err.to_string().contains("malformed"), "{err}");
}
