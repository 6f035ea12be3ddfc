//! `dentate bench-report`: reads the JSON lines of `dentate bench --json`
//! and `benches/faiss_compare.py --json` (one race), prints QPS at recall
//! targets per engine and index family with same-run ratios, and renders
//! the recall–QPS curves to SVG (plotters, as `evalplot`).

use clap::Args;
use plotters::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::shared::Res;

/// Arguments of `dentate bench-report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// JSON-lines result files (both engines' rows).
    #[arg(long, required = true, num_args = 1..)]
    pub results: Vec<PathBuf>,
    /// Comma-separated recall@k targets.
    #[arg(long, default_value = "0.90,0.95,0.99")]
    pub targets: String,
    /// Write the recall–QPS plot here (SVG).
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Title of the plot.
    #[arg(long, default_value = "recall@10 vs QPS")]
    pub title: String,
}

/// One measured configuration.
#[derive(Debug, Clone)]
struct Point {
    recall: f64,
    qps: f64,
    build_s: f64,
    bpv: f64,
    config: String,
}

/// The family a row belongs to (one curve): whether it is Dentate's, and its name.
fn series(r: &Value) -> Option<(bool, String)> {
    let engine = r["engine"].as_str()?;
    let index = r["index"].as_str()?;
    let opq = r["opq"].as_bool().unwrap_or(false);
    let dentate = engine == "dentate";
    let name = match (dentate, index) {
        (true, "fastscan" | "ivffastscan") => format!("Dentate fast-scan{} + re-rank", if opq { " +OPQ" } else { "" }),
        (true, "ivfpq") => format!("Dentate {}IVF-PQ 8-bit", if opq { "OPQ+" } else { "" }),
        (true, "flat") => "Dentate exact".to_string(),
        (false, "ivfpqfs") => format!("faiss {}IVF,PQx4fs + RefineFlat", if opq { "OPQ," } else { "" }),
        (false, "ivfpq") => format!("faiss {}IVF,PQ 8-bit", if opq { "OPQ," } else { "" }),
        (false, "flat") => "faiss IndexFlatIP".to_string(),
        _ => format!("{engine} {index}{}", if opq { " +OPQ" } else { "" }),
    };
    let name = match r["label"].as_str() {
        Some(label) => format!("{name} [{label}]"),
        None => name,
    };
    Some((dentate, name))
}

/// Exact-search families (no build to speak of, no approximation).
fn is_exact(name: &str) -> bool {
    name.ends_with("exact") || name.ends_with("IndexFlatIP")
}

fn point(r: &Value) -> Option<Point> {
    let num = |k: &str| r[k].as_f64();
    let show = |k: &str| match &r[k] {
        Value::Null => None,
        v => Some(format!("{k} {v}")),
    };
    let config = ["nlist", "m", "nprobe", "rerank"]
        .iter()
        .filter_map(|k| show(k))
        .collect::<Vec<_>>()
        .join(", ");
    Some(Point {
        recall: num("recall_at_k")?,
        qps: num("qps")?,
        build_s: num("build_s").unwrap_or(f64::NAN),
        bpv: num("bytes_per_vector").unwrap_or(f64::NAN),
        config: if config.is_empty() { "-".into() } else { config },
    })
}

/// The fastest point reaching `target`.
fn best_at(points: &[Point], target: f64) -> Option<&Point> {
    points
        .iter()
        .filter(|p| p.recall >= target)
        .max_by(|a, b| a.qps.total_cmp(&b.qps))
}

/// The fastest-building point reaching `target`.
fn fastest_build_at(points: &[Point], target: f64) -> Option<&Point> {
    points
        .iter()
        .filter(|p| p.recall >= target)
        .min_by(|a, b| a.build_s.total_cmp(&b.build_s))
}

/// The upper-left envelope: points no other point beats on both recall and QPS.
fn frontier(points: &[Point]) -> Vec<(f64, f64)> {
    let mut v: Vec<&Point> = points.iter().collect();
    v.sort_by(|a, b| b.recall.total_cmp(&a.recall).then(b.qps.total_cmp(&a.qps)));
    let mut out = Vec::new();
    let mut best = f64::NEG_INFINITY;
    for p in v {
        if p.qps > best {
            best = p.qps;
            out.push((p.recall, p.qps));
        }
    }
    out.reverse();
    out
}

/// Prints the report and writes the plot.
pub fn run(a: &ReportArgs) -> Res<()> {
    let targets = a
        .targets
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<f64>()
                .map_err(|_| format!("--targets: `{t}` is not a number"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut groups: BTreeMap<(bool, String), Vec<Point>> = BTreeMap::new();
    let mut context = None;
    for path in &a.results {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.trim_start().starts_with('{'))
        {
            let r: Value = serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
            if let (Some(key), Some(p)) = (series(&r), point(&r)) {
                context.get_or_insert_with(|| {
                    format!(
                        "n = {}, d = {}, {} queries, k = {}, {} threads",
                        r["n"], r["d"], r["nq"], r["k"], r["threads"]
                    )
                });
                groups.entry(key).or_default().push(p);
            }
        }
    }
    if groups.is_empty() {
        return Err("no result rows found".into());
    }
    println!("{}\n", context.unwrap_or_default());
    for &t in &targets {
        println!("#### recall@10 ≥ {t:.2}\n");
        println!("| engine / index | QPS | recall | settings | build s | bytes/vec |");
        println!("|---|---|---|---|---|---|");
        for ((_, name), pts) in &groups {
            match best_at(pts, t) {
                Some(p) => println!(
                    "| {name} | {:.0} | {:.4} | {} | {:.2} | {:.0} |",
                    p.qps, p.recall, p.config, p.build_s, p.bpv
                ),
                None => println!("| {name} | not reached | - | - | - | - |"),
            }
        }
        let best_of = |dentate: bool| {
            groups
                .iter()
                .filter(|((d, _), _)| *d == dentate)
                .filter_map(|((_, name), pts)| best_at(pts, t).map(|p| (name, p)))
                .max_by(|a, b| a.1.qps.total_cmp(&b.1.qps))
        };
        // Exact search builds nothing worth comparing: approximate families only.
        let build_of = |dentate: bool| {
            groups
                .iter()
                .filter(|((d, name), _)| *d == dentate && !is_exact(name))
                .filter_map(|((_, name), pts)| fastest_build_at(pts, t).map(|p| (name, p)))
                .min_by(|a, b| a.1.build_s.total_cmp(&b.1.build_s))
        };
        match (best_of(true), best_of(false)) {
            (Some((dn, d)), Some((fnm, f))) => println!(
                "\nBest QPS: {dn} ({}) {:.0} vs {fnm} ({}) {:.0}: **{:.2}×**; their builds {:.2} s vs {:.2} s ({:.2}×).",
                d.config,
                d.qps,
                f.config,
                f.qps,
                d.qps / f.qps,
                d.build_s,
                f.build_s,
                d.build_s / f.build_s
            ),
            _ => println!("\nBest QPS: one engine does not reach this recall."),
        }
        if let (Some((dn, d)), Some((fnm, f))) = (build_of(true), build_of(false)) {
            println!(
                "Fastest approximate build reaching it: {dn} ({}) {:.2} s vs {fnm} ({}) {:.2} s: **{:.2}×**.\n",
                d.config,
                d.build_s,
                f.config,
                f.build_s,
                d.build_s / f.build_s
            );
        } else {
            println!();
        }
    }
    // Labelled series (settings someone chose elsewhere, e.g. `dentate tune`
    // on other queries) against the other engine's best at the highest
    // target they reach; that best is chosen on the reported queries.
    for ((dentate, name), pts) in groups.iter().filter(|((_, n), _)| n.ends_with(']')) {
        for p in pts {
            let rival = targets
                .iter()
                .filter(|&&t| p.recall >= t)
                .max_by(|a, b| a.total_cmp(b))
                .and_then(|&t| {
                    groups
                        .iter()
                        .filter(|((d, n), _)| d != dentate && !n.ends_with(']'))
                        .filter_map(|(_, q)| best_at(q, t))
                        .max_by(|a, b| a.qps.total_cmp(&b.qps))
                        .map(|f| (t, f))
                });
            match rival {
                Some((t, f)) => println!(
                    "{name} ({}): {:.0} QPS at recall {:.4}; the other engine's best at ≥ {t:.2} ({}, chosen on these queries) {:.0}: **{:.2}×**.",
                    p.config,
                    p.qps,
                    p.recall,
                    f.config,
                    f.qps,
                    p.qps / f.qps
                ),
                None => println!(
                    "{name} ({}): {:.0} QPS at recall {:.4}, below every target.",
                    p.config, p.qps, p.recall
                ),
            }
        }
    }
    if let Some(path) = &a.svg {
        let svg = plot(&groups, &a.title, &targets)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, svg)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The recall–QPS plot: each family's envelope as a line, every measured
/// point as a dot, QPS on a log axis.
fn plot(groups: &BTreeMap<(bool, String), Vec<Point>>, title: &str, targets: &[f64]) -> Res<String> {
    let all: Vec<&Point> = groups.values().flatten().collect();
    let xmin = all
        .iter()
        .map(|p| p.recall)
        .fold(1.0f64, f64::min)
        .max(0.5)
        .min(targets.iter().copied().fold(1.0, f64::min) - 0.02);
    let (ymin, ymax) = all
        .iter()
        .filter(|p| p.recall >= xmin)
        .fold((f64::INFINITY, 0f64), |(lo, hi), p| (lo.min(p.qps), hi.max(p.qps)));
    let (ymin, ymax) = if ymin.is_finite() {
        (ymin * 0.7, ymax * 1.4)
    } else {
        (1.0, 10.0)
    };
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (900, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(xmin..1.0f64, (ymin..ymax).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("recall@10")
            .y_desc("queries per second (log)")
            .light_line_style(WHITE.mix(0.0))
            .x_label_formatter(&|x| format!("{x:.2}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        for &t in targets {
            chart.draw_series(LineSeries::new(vec![(t, ymin), (t, ymax)], BLACK.mix(0.15)))?;
        }
        for (i, ((dentate, name), pts)) in groups.iter().enumerate() {
            let color = crate::evalplot::COLORS[i % crate::evalplot::COLORS.len()];
            let width = if *dentate { 3 } else { 2 };
            let line: Vec<(f64, f64)> = frontier(pts).into_iter().filter(|p| p.0 >= xmin).collect();
            chart
                .draw_series(LineSeries::new(line.clone(), color.stroke_width(width)))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width)));
            chart.draw_series(
                pts.iter()
                    .filter(|p| p.recall >= xmin)
                    .map(|p| Circle::new((p.recall, p.qps), 2, color.mix(0.5).filled())),
            )?;
            chart.draw_series(line.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        root.present()?;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(recall: f64, qps: f64) -> Point {
        Point {
            recall,
            qps,
            build_s: 1.0,
            bpv: 1.0,
            config: String::new(),
        }
    }

    #[test]
    fn frontier_keeps_only_undominated_points() {
        let pts = [
            p(0.9, 100.0),
            p(0.95, 50.0),
            p(0.93, 40.0),
            p(0.99, 10.0),
            p(0.85, 90.0),
        ];
        assert_eq!(frontier(&pts), vec![(0.9, 100.0), (0.95, 50.0), (0.99, 10.0)]);
        assert_eq!(best_at(&pts, 0.94).map(|p| p.qps), Some(50.0));
        assert!(best_at(&pts, 0.995).is_none());
    }

    #[test]
    fn rows_map_to_families() {
        let r: Value =
            serde_json::json!({"engine": "faiss", "index": "ivfpqfs", "opq": false, "recall_at_k": 0.9, "qps": 5.0});
        assert_eq!(series(&r).unwrap().1, "faiss IVF,PQx4fs + RefineFlat");
        let r: Value = serde_json::json!({"engine": "dentate", "index": "ivffastscan", "opq": true});
        assert_eq!(
            series(&r).unwrap(),
            (true, "Dentate fast-scan +OPQ + re-rank".to_string())
        );
        assert!(point(&r).is_none());
        let r: Value = serde_json::json!({"engine": "dentate", "index": "ivffastscan", "opq": false, "label": "tune"});
        assert_eq!(
            series(&r).unwrap(),
            (true, "Dentate fast-scan + re-rank [tune]".to_string())
        );
    }
}
