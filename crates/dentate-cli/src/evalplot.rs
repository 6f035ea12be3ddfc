//! The SVG plot of `dentate eval locomo --out`: evidence recall and answer
//! recall (overall) against the context budget, one line per pipeline ×
//! retriever. Without budgets, against k.

use dentate_memory::Cut;
use dentate_memory::eval::EvalOutcome;
use plotters::prelude::*;

use crate::shared::Res;

/// Line colours (the Tableau 10 palette), distinct on white.
pub(crate) const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One panel's series: (label, points).
type Series = Vec<(String, Vec<(f64, f64)>)>;

/// The plot as an SVG document.
pub fn svg(out: &EvalOutcome) -> Res<String> {
    let by_budget = out
        .runs
        .iter()
        .flat_map(|r| &r.report.cuts)
        .any(|c| matches!(c, Cut::Budget(_)));
    let on_axis = |c: &Cut| matches!(c, Cut::Budget(_)) == by_budget;
    let series = |answer: bool| -> Series {
        out.runs
            .iter()
            .map(|r| {
                let points = r
                    .report
                    .overall
                    .per_cut
                    .iter()
                    .filter(|m| on_axis(&m.cut))
                    .filter_map(|m| {
                        let y = if answer { m.mean_answer_recall } else { m.mean_recall };
                        y.map(|y| (m.cut.value() as f64, y))
                    })
                    .collect();
                (format!("{} · {}", r.pipeline, r.retriever), points)
            })
            .collect()
    };
    let xmax = out
        .runs
        .iter()
        .flat_map(|r| &r.report.cuts)
        .filter(|c| on_axis(c))
        .map(|c| c.value() as f64)
        .fold(1.0, f64::max);
    let x_desc = if by_budget {
        "context budget (tokens)"
    } else {
        "k (items)"
    };
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (1100, 460)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!(
            "LoCoMo {} ({}), {} questions, embedder {}",
            out.split,
            if out.in_sample { "in-sample" } else { "held-out" },
            out.questions,
            out.embedder
        );
        let root = root.titled(&title, ("sans-serif", 18))?;
        let panels = root.split_evenly((1, 2));
        for (panel, (name, answer)) in panels.iter().zip([("evidence recall", false), ("answer recall", true)]) {
            let mut chart = ChartBuilder::on(panel)
                .caption(name, ("sans-serif", 16))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(48)
                .build_cartesian_2d(0f64..xmax * 1.05, 0f64..1f64)?;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(name)
                .light_line_style(WHITE.mix(0.0))
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.1}"))
                .draw()?;
            for (i, (label, points)) in series(answer).into_iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
                chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .draw()?;
        }
        root.present()?;
    }
    Ok(text)
}
