//! The LoCoMo evaluation on a handwritten conversation in the dataset's
//! format, offline and with a scripted judge model.

mod common;

use common::{chat, chat_body, embedder};
use dentate_embed::http::testing::{Reply, ScriptedServer};
use dentate_memory::eval::{self, EvalOptions};
use dentate_memory::{Cut, Item, Llm, Memory, PipelineKind, Retrieved, Retriever, locomo};
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
    {"question": "What did Bob paint?", "evidence": ["D2:1"], "category": 5,
     "adversarial_answer": "the blue bicycle his grandfather left him"}
  ]
}]"#;

fn opts(kind: &str) -> EvalOptions {
    let mut o = EvalOptions::new(PipelineKind::parse(kind).unwrap(), embedder());
    o.ks = vec![1, 2, 5];
    o
}

#[test]
fn retrieval_metrics_per_category() {
    let ds = locomo::parse(FIXTURE).unwrap();
    for kind in ["rag", "hema"] {
        let dir = tempfile::tempdir().unwrap();
        let out = eval::run(&ds, &opts(kind), dir.path(), &mut |_| {}).unwrap();
        assert_eq!((out.messages, out.questions), (6, 6));
        assert_eq!(out.loader.date_times_without_session, 1);
        assert_eq!(out.quirks.questions_without_evidence, 1);
        assert_eq!(out.quirks.numeric_answers, 1);
        assert_eq!(out.runs.len(), 1);
        let r = &out.runs[0].report;
        let row = |c: u8| r.categories.iter().find(|x| x.category == Some(c)).unwrap();
        // Single-hop facts with distinctive words are found at k = 1.
        assert_eq!(row(4).per_cut[0].mean_recall, Some(1.0), "{kind}");
        // ... and their one-word answers are in the context.
        assert_eq!(row(4).per_cut[0].mean_answer_recall, Some(1.0), "{kind}");
        // The multi-hop question has two evidence turns: at most half at k = 1.
        assert!(row(1).per_cut[0].mean_recall.unwrap() <= 0.5);
        assert_eq!(row(1).per_cut[2].mean_recall, Some(1.0), "{kind}: both within 5 of 6");
        assert_eq!(row(1).per_cut[2].mean_answer_recall, Some(1.0), "{kind}");
        // The question without evidence is not scored for evidence, but its
        // answer is ("Likely yes": one content word, "likely").
        assert_eq!(row(3).scored, 0);
        assert_eq!(row(3).per_cut[0].answer_scored, 1);
        // Category 5 has no gold answer to recall.
        assert_eq!(row(5).per_cut[0].answer_scored, 0);
        assert_eq!(r.overall.scored, 5);
        // Context grows with k.
        let t = &r.overall.per_cut;
        assert!(t[0].mean_context_tokens < t[2].mean_context_tokens);
        let md = out.to_markdown();
        assert!(md.contains("single-hop") && md.contains("overall"), "{md}");
        assert!(out.to_json()["runs"][0]["retrieval"].is_object());
    }
}

#[test]
fn every_pipeline_and_retriever_in_one_run_at_budgets() {
    let ds = locomo::parse(FIXTURE).unwrap();
    let mut o = opts("rag");
    o.pipelines.push(PipelineKind::parse("hema").unwrap());
    o.retrievers = ["dense", "bm25", "hybrid"]
        .iter()
        .map(|r| Retriever::parse(r).unwrap())
        .collect();
    o.ks = vec![];
    o.budgets = vec![15, 40, 3500];
    let dir = tempfile::tempdir().unwrap();
    let out = eval::run(&ds, &o, dir.path(), &mut |_| {}).unwrap();
    let names: Vec<(String, String)> = out
        .runs
        .iter()
        .map(|r| (r.pipeline.clone(), r.retriever.clone()))
        .collect();
    assert_eq!(names.len(), 6);
    assert_eq!(names[0], ("rag".into(), "dense".into()));
    assert_eq!(names[5], ("hema".into(), "weighted:0.5".into()));
    assert_eq!(out.ingest.len(), 2);
    assert_eq!(out.ingest[0].messages, 6);
    assert_eq!(out.ingest[0].items, 6);
    for r in &out.runs {
        let o = &r.report.overall.per_cut;
        assert_eq!(
            o.iter().map(|m| m.cut).collect::<Vec<_>>(),
            [Cut::Budget(15), Cut::Budget(40), Cut::Budget(3500)]
        );
        for (m, b) in o.iter().zip([15.0, 40.0, 3500.0]) {
            assert!(m.mean_context_tokens.unwrap() <= b, "{m:?}");
        }
        // Monotone in the budget, and at 3,500 tokens all six turns fit.
        assert!(o[0].mean_items <= o[1].mean_items && o[1].mean_items <= o[2].mean_items);
        assert!(o[0].mean_recall <= o[1].mean_recall && o[1].mean_recall <= o[2].mean_recall);
        // BM25 returns only items sharing a word with the question; dense
        // and hybrid rank every item.
        if r.pipeline == "rag" && r.retriever != "bm25" {
            assert_eq!(o[2].mean_items, Some(6.0));
            assert_eq!(o[2].mean_recall, Some(1.0), "{}", r.retriever);
            // Every answer is in the whole conversation but "Likely yes"
            // (an inference): 4 of 5 scored answers.
            assert_eq!(o[2].mean_answer_recall, Some(0.8), "{}", r.retriever);
            // 15 tokens hold one dated turn at most.
            assert!(o[0].mean_items.unwrap() <= 1.0);
        }
    }
    let summary = out.summary_markdown();
    assert_eq!(summary.lines().count(), 2 + 6 * 3, "{summary}");
    assert!(summary.contains("| hema | bm25 | 1500 tokens |") || summary.contains("| hema | bm25 | 40 tokens |"));
}

/// One turn per item, each gold answer a word found only in its evidence
/// turns (one word per turn): evidence recall and answer recall must agree
/// question by question, so their means agree at every cut.
const ONE_WORD_PER_TURN: &str = r#"[{
  "sample_id": "agree-1",
  "conversation": {
    "speaker_a": "Ann", "speaker_b": "Bob",
    "session_1_date_time": "9:15 am on 2 March, 2024",
    "session_1": [
      {"speaker": "Ann", "dia_id": "D1:1", "text": "My cat is called Pixel."},
      {"speaker": "Bob", "dia_id": "D1:2", "text": "I race in Berlin."},
      {"speaker": "Ann", "dia_id": "D1:3", "text": "My sister moves to Lisbon."},
      {"speaker": "Bob", "dia_id": "D1:4", "text": "I fixed an old bicycle."},
      {"speaker": "Ann", "dia_id": "D1:5", "text": "I play the cello."},
      {"speaker": "Bob", "dia_id": "D1:6", "text": "I grow tomatoes."}
    ]
  },
  "qa": [
    {"question": "What is Ann's cat called?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
    {"question": "Where does Bob race?", "answer": "Berlin", "evidence": ["D1:2"], "category": 4},
    {"question": "Where does the sister move, and what does Ann play?", "answer": "Lisbon; cello",
     "evidence": ["D1:3", "D1:5"], "category": 1},
    {"question": "What did Bob fix and grow?", "answer": "a bicycle and tomatoes",
     "evidence": ["D1:4", "D1:6"], "category": 1},
    {"question": "Which instrument?", "answer": "cello", "evidence": ["D1:5"], "category": 3}
  ]
}]"#;

#[test]
fn provenance_and_answer_recall_agree_when_items_are_turns() {
    let ds = locomo::parse(ONE_WORD_PER_TURN).unwrap();
    let mut o = opts("rag");
    o.retrievers = vec![Retriever::Dense, Retriever::Bm25];
    o.ks = vec![1, 2, 3];
    o.budgets = vec![12, 25, 40];
    let dir = tempfile::tempdir().unwrap();
    let out = eval::run(&ds, &o, dir.path(), &mut |_| {}).unwrap();
    let mut partial = false;
    for r in &out.runs {
        for row in r.report.categories.iter().chain([&r.report.overall]) {
            for m in &row.per_cut {
                assert_eq!(m.scored, m.answer_scored);
                let (e, a) = (m.mean_recall.unwrap(), m.mean_answer_recall.unwrap());
                assert!(
                    (e - a).abs() < 1e-12,
                    "{} {} {:?}: {e} vs {a}",
                    r.retriever,
                    row.name,
                    m.cut
                );
                partial |= e > 0.0 && e < 1.0;
            }
        }
    }
    assert!(partial, "the fixture must exercise partial recall");
}

/// The JSON layout, with every value replaced by its type: arrays by the
/// shape of their first element.
fn shape(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(a) => Value::Array(a.first().map(shape).into_iter().collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
    }
}

#[test]
fn json_schema_is_stable() {
    let ds = locomo::parse(FIXTURE).unwrap();
    let mut o = opts("hema");
    o.budgets = vec![500];
    let dir = tempfile::tempdir().unwrap();
    let out = eval::run(&ds, &o, dir.path(), &mut |_| {}).unwrap();
    let got = shape(&out.to_json());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/eval_schema_v5.json");
    if std::env::var_os("DENTATE_BLESS").is_some() {
        std::fs::write(path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
    }
    let want: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        got, want,
        "the JSON layout changed: bump JSON_SCHEMA_VERSION and the fixture"
    );
    assert_eq!(out.to_json()["schema"], eval::JSON_SCHEMA_VERSION);
}

/// The judge rows of one RAG evaluation of `ds` whose answering and
/// judging model is the scripted `server`.
fn judged_rag(ds: &locomo::Dataset, server: &ScriptedServer) -> Vec<eval::JudgeRow> {
    let llm: Arc<dyn Llm> = Arc::new(chat(server, 2000, 0));
    let mut o = opts("rag");
    o.judge_llm = Some(llm);
    let dir = tempfile::tempdir().unwrap();
    let out = eval::run(ds, &o, dir.path(), &mut |_| {}).unwrap();
    out.runs[0].judge.clone().unwrap()
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
    let rows = judged_rag(&ds, &s);
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

/// A judge that grades like a careful reader of the judge prompt: CORRECT
/// exactly when the generated answer is what the gold answer says (the
/// gold line starts with it).
fn literal_judge(body: &serde_json::Value) -> bool {
    let prompt = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    // The last such line: the prompt's worked example comes first.
    let field = |name: &str| {
        prompt
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let (gold, generated) = (field("Gold answer:"), field("Generated answer:"));
    !generated.is_empty() && gold.to_lowercase().starts_with(&generated.to_lowercase())
}

/// Judge counts (judged, correct) of the adversarial category when the
/// answering model says `answer` to every question.
fn adversarial_judged(answer: &'static str) -> (usize, usize) {
    let ds = locomo::parse(FIXTURE).unwrap();
    let s = ScriptedServer::start(64, move |_, body| {
        if body.get("response_format").is_none() {
            Reply::ok(chat_body(answer))
        } else if literal_judge(body) {
            Reply::ok(chat_body("{\"label\": \"CORRECT\"}"))
        } else {
            Reply::ok(chat_body("{\"label\": \"WRONG\"}"))
        }
    })
    .unwrap();
    let rows = judged_rag(&ds, &s);
    let adv = rows.iter().find(|r| r.category == Some(5)).unwrap();
    (adv.judged, adv.correct)
}

#[test]
fn adversarial_questions_are_correct_when_the_answer_is_not_available() {
    // The fixture's category-5 question has the real data's shape: an
    // `adversarial_answer` that is the tempting wrong answer (Bob repaired
    // the bicycle; he never painted anything), and no `answer`.
    assert_eq!(
        adversarial_judged("the blue bicycle his grandfather left him"),
        (1, 0),
        "falling for the trap is wrong"
    );
    assert_eq!(
        adversarial_judged("Not mentioned in the conversation"),
        (1, 1),
        "saying the information is not there is right"
    );
}

#[test]
fn judge_gold_of_each_category() {
    let ds = locomo::parse(
        r#"[{"sample_id": "g", "conversation": {"speaker_a": "A", "speaker_b": "B",
        "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]},
        "qa": [
          {"question": "Plain?", "answer": "yes", "evidence": ["D1:1"], "category": 4},
          {"question": "Trap?", "adversarial_answer": "a red kite", "evidence": ["D1:1"], "category": 5},
          {"question": "Yes/no trap?", "adversarial_answer": "Yes", "answer": "No", "evidence": ["D1:1"], "category": 5},
          {"question": "No gold?", "evidence": ["D1:1"], "category": 2}
        ]}]"#,
    )
    .unwrap();
    let qa = &ds.conversations[0].qa;
    assert_eq!(eval::judge_gold(&qa[0]).as_deref(), Some("yes"));
    let trap = eval::judge_gold(&qa[1]).unwrap();
    assert!(trap.starts_with(eval::NOT_MENTIONED), "{trap}");
    assert!(trap.contains("\"a red kite\" is a wrong answer"), "{trap}");
    let yes_no = eval::judge_gold(&qa[2]).unwrap();
    assert!(
        yes_no.starts_with(eval::NOT_MENTIONED) && yes_no.contains("or: No"),
        "{yes_no}"
    );
    assert!(yes_no.contains("\"Yes\" is a wrong answer"), "{yes_no}");
    assert_eq!(eval::judge_gold(&qa[3]), None);
}

/// Two sessions a week apart. "yesterday" in the first resolves to
/// 1 March 2024; nothing in the second says its date, 9 March 2024, which
/// only the rendered header `[9 March 2024]` carries.
const HEADER_DATES: &str = r#"[{
  "sample_id": "header-1",
  "conversation": {
    "speaker_a": "Ann", "speaker_b": "Bob",
    "session_1_date_time": "9:15 am on 2 March, 2024",
    "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I started cello lessons yesterday."}],
    "session_2_date_time": "6:40 pm on 9 March, 2024",
    "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "The weather is grey and cold here."}]
  },
  "qa": [
    {"question": "When did Ann start cello lessons?", "answer": "1 March 2024", "evidence": ["D1:1"], "category": 2},
    {"question": "When did Bob say the weather was grey?", "answer": "9 March 2024", "evidence": ["D2:1"], "category": 2}
  ]
}]"#;

#[test]
fn answer_recall_counts_what_items_say_not_their_date_header() {
    let ds = locomo::parse(HEADER_DATES).unwrap();
    let mut o = opts("rag");
    o.pipelines
        .push(PipelineKind::parse("rag").unwrap().resolve_dates(false));
    o.ks = vec![];
    o.budgets = vec![3500];
    let dir = tempfile::tempdir().unwrap();
    let out = eval::run(&ds, &o, dir.path(), &mut |_| {}).unwrap();
    let temporal = |run: usize| {
        let c = out.runs[run]
            .report
            .categories
            .iter()
            .find(|c| c.category == Some(2))
            .unwrap();
        let m = &c.per_cut[0];
        assert_eq!(m.mean_items, Some(2.0), "both turns packed");
        (m.mean_answer_recall.unwrap(), m.mean_rendered_answer_recall.unwrap())
    };
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    // Dates resolved: the first answer is said in full ("(yesterday = 1
    // March 2024)"); of "9 March 2024" only "march" and "2024" are said
    // (by that same resolution), never the 9 of the second session's
    // header. The rendered figure credits the header: 1.0.
    let (said, rendered) = temporal(0);
    assert!(close(said, (1.0 + 2.0 / 3.0) / 2.0), "{said}");
    assert!(close(rendered, 1.0), "{rendered}");
    // Dates as said: neither item says a date at all.
    let (said, rendered) = temporal(1);
    assert!(close(said, 0.0), "{said}");
    assert!(close(rendered, (2.0 / 3.0 + 1.0) / 2.0), "{rendered}");
    let md = out.to_markdown();
    assert!(md.contains("answer recall (rendered, old)"), "{md}");
}

/// `n` turns about a few recurring topics, so that dense and BM25 scores
/// spread and min–max fusion depends on how deep each list is taken.
fn many_turns(n: usize) -> String {
    let topics = [
        ("cat", "Pixel the grey cat chased a moth across the kitchen"),
        ("marathon", "the Berlin marathon training plan has long runs on Sunday"),
        ("cello", "cello lessons at the community music school went well"),
        ("bicycle", "the old blue bicycle needed a new chain and brakes"),
        ("garden", "tomatoes and basil are growing fast in the garden"),
        ("work", "a long meeting at work about the quarterly budget"),
        ("travel", "planning a train trip to Lisbon with my sister Clara"),
    ];
    let turns: Vec<String> = (0..n)
        .map(|i| {
            let (_, text) = topics[(i * 5 + i / 3) % topics.len()];
            let (_, other) = topics[(i * 3 + 1) % topics.len()];
            let speaker = if i % 2 == 0 { "Ann" } else { "Bob" };
            let body = match i % 4 {
                0 => format!("Today {text}."),
                1 => format!("Also {text}, and by the way {other}."),
                2 => format!("Remember when {other}? Number {i}."),
                _ => format!("{text} again, turn {i}."),
            };
            format!(
                r#"{{"speaker": "{speaker}", "dia_id": "D1:{}", "text": "{body}"}}"#,
                i + 1
            )
        })
        .collect();
    let qa: Vec<String> = [
        "What happened with the cat in the kitchen?",
        "How is the marathon training going?",
        "Where are the cello lessons?",
        "What did the bicycle need?",
        "What grows in the garden?",
        "What was the meeting at work about?",
        "Who is going to Lisbon?",
        "Remember the long runs and the chain?",
    ]
    .iter()
    .map(|q| format!(r#"{{"question": "{q}", "answer": "x", "evidence": ["D1:1"], "category": 4}}"#))
    .collect();
    format!(
        r#"[{{"sample_id": "many", "conversation": {{"speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "9:15 am on 2 March, 2024", "session_1": [{}]}}, "qa": [{}]}}]"#,
        turns.join(","),
        qa.join(",")
    )
}

#[test]
fn recall_at_k_is_what_retrieve_k_returns() {
    let ds = locomo::parse(&many_turns(120)).unwrap();
    let conv = &ds.conversations[0];
    let dir = tempfile::tempdir().unwrap();
    let mut mem = Memory::open(dir.path(), PipelineKind::parse("rag").unwrap(), embedder(), None).unwrap();
    mem.ingest("u", &eval::conversation_messages(conv)).unwrap();
    mem.set_retriever(Retriever::default());
    let packer = mem.packer("u").unwrap();
    let sayer = mem.sayer("u").unwrap();
    let ks = [1, 3, 5, 10];
    let cuts: Vec<Cut> = ks.iter().map(|&k| Cut::K(k)).collect();
    let mut deeper_differs = 0;
    for qa in &conv.qa {
        let scored = eval::score_question(&mut mem, "u", &packer, &sayer, qa, &cuts).unwrap();
        let deep = mem.retrieve("u", &qa.question, 64).unwrap();
        for (i, &k) in ks.iter().enumerate() {
            let user_sees = mem.retrieve("u", &qa.question, k).unwrap();
            assert_eq!(
                scored.cuts[i].retrieved,
                eval::credited_refs(&user_sees),
                "k = {k}: {}",
                qa.question
            );
            assert_eq!(scored.cuts[i].items, user_sees.len());
            let cut_of_deep = &deep[..k.min(deep.len())];
            deeper_differs += usize::from(eval::credited_refs(cut_of_deep) != eval::credited_refs(&user_sees));
        }
    }
    // The fixture exercises the difference: the top k of a deeper fused
    // list is not always what retrieve(k) returns.
    assert!(deeper_differs > 0, "fusion never depended on depth here");
}

fn retrieved(kind: &str, refs: &[&str]) -> Retrieved {
    Retrieved {
        item: Item {
            id: 1,
            user: "u".into(),
            pipeline: "p".into(),
            kind: kind.into(),
            text: "text".into(),
            sources: vec![1],
            said_at: None,
            refers_to: None,
            turn: 1,
            parent: None,
            created_at: 0,
        },
        score: 1.0,
        source_refs: refs.iter().map(|r| r.to_string()).collect(),
        session: None,
        span: None,
        speakers: Vec::new(),
    }
}

#[test]
fn summaries_headlines_and_reasoning_earn_no_evidence_credit() {
    use dentate_memory::{amory, premem};
    // Items that cite messages without quoting them: HEMA's block summary,
    // Amory's story and sub-plot, PREMem's reasoning fragment.
    let citing = [
        retrieved("summary", &["D1:1", "D1:2"]),
        retrieved(amory::NARRATIVE, &["D1:3"]),
        retrieved(amory::SUBPLOT, &["D1:4"]),
        retrieved(premem::REASONING, &["D1:5", "D1:6"]),
    ];
    assert!(eval::credited_refs(&citing).is_empty());
    // Items that quote their messages are credited: a RAG turn, a HEMA
    // chunk, an Amory fragment and fact, PREMem fragments, Nemori episodes.
    let quoting = [
        retrieved("turn", &["D2:1"]),
        retrieved("chunk", &["D2:2"]),
        retrieved(amory::FRAGMENT, &["D2:3"]),
        retrieved(amory::FACT, &["D2:4"]),
        retrieved("factual", &["D2:5", "D2:1"]),
        retrieved("episode", &["D2:6"]),
    ];
    assert_eq!(
        eval::credited_refs(&quoting),
        ["D2:1", "D2:2", "D2:3", "D2:4", "D2:5", "D2:6"]
    );
    let mut mixed = citing.to_vec();
    mixed.push(retrieved("turn", &["D1:1"]));
    assert_eq!(eval::credited_refs(&mixed), ["D1:1"]);
}

#[test]
fn the_output_says_which_split_it_ran_on() {
    let two = |a: &str, b: &str| {
        format!(
            r#"[{{"sample_id": "{a}", "conversation": {{"speaker_a": "A", "speaker_b": "B",
            "session_1": [{{"speaker": "A", "dia_id": "D1:1", "text": "I like tea."}}]}},
            "qa": [{{"question": "What does A like?", "answer": "tea", "evidence": ["D1:1"], "category": 4}}]}},
            {{"sample_id": "{b}", "conversation": {{"speaker_a": "A", "speaker_b": "B",
            "session_1": [{{"speaker": "A", "dia_id": "D1:1", "text": "I like coffee."}}]}},
            "qa": [{{"question": "What does A like?", "answer": "coffee", "evidence": ["D1:1"], "category": 4}}]}}]"#
        )
    };
    let ds = locomo::parse(&two("conv-26", "conv-41")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = eval::run(&ds, &opts("rag"), dir.path(), &mut |_| {}).unwrap();
    assert_eq!((out.split, out.in_sample), ("custom", true));
    let held = ds
        .select(&locomo::Split::Conversations(vec!["conv-41".into()]))
        .unwrap();
    let out = eval::run(&held, &opts("rag"), dir.path(), &mut |_| {}).unwrap();
    assert_eq!((out.split, out.in_sample, out.conversations), ("custom", false, 1));
    let j = out.to_json();
    assert_eq!(j["dataset"]["sample_ids"], serde_json::json!(["conv-41"]));
    assert_eq!(j["dataset"]["in_sample"], false);
    assert!(out.to_markdown().contains("held-out"), "{}", out.to_markdown());
    let ds = locomo::parse(&two("conv-41", "conv-42")).unwrap();
    let out = eval::run(
        &ds.select(&locomo::Split::Report).unwrap(),
        &opts("rag"),
        dir.path(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((out.split, out.in_sample), ("report", false));
    assert!(
        out.split_line()
            .starts_with("split report (conv-41, conv-42): held-out")
    );
}
