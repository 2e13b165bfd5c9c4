//! A tiny SVG line-chart writer: axes, ticks, one polyline per series, a legend.
//!
//! Two x scales: linear (throughput over time) and "nines" for latency CDFs, where
//! x = -log10(1 - quantile) so 90%, 99%, 99.9% … are evenly spaced and the tail is visible.
//! Hand-written because two chart types do not justify a plotting crate's build.

use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 180.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Colour-blind-safe palette (Okabe–Ito).
const COLOURS: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000",
];
/// Deepest quantile the nines axis shows: 99.999%.
const NINES_MAX: f64 = 5.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XScale {
    Linear,
    /// x values are quantiles in [0, 1].
    Nines,
}

#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text; series with the same name share one legend entry (rounds of one
    /// target, say), so give them the same style too.
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Index into the palette.
    pub colour: usize,
    pub dashed: bool,
}

#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: XScale,
    pub series: Vec<Series>,
}

/// Escapes text for SVG content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Maps a quantile to the nines axis: 0 → 0, 0.9 → 1, 0.99 → 2, 1 → the axis end.
pub fn nines(q: f64) -> f64 {
    if q >= 1.0 {
        return NINES_MAX;
    }
    (-(1.0 - q.max(0.0)).log10()).min(NINES_MAX)
}

/// About `target` round tick values (1, 2, 5 × 10^k steps) covering [0, max].
pub fn nice_ticks(max: f64, target: usize) -> Vec<f64> {
    if !(max.is_finite() && max > 0.0) {
        return vec![0.0, 1.0];
    }
    let raw = max / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let count = (max / step).ceil() as usize;
    (0..=count).map(|i| i as f64 * step).collect()
}

fn format_tick(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

impl Chart {
    pub fn to_svg(&self) -> String {
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        // On the nines axis the max (quantile 1) is drawn at the right edge: the first
        // whole nine past the deepest finite quantile.
        let nines_edge = points()
            .filter(|p| p.0 < 1.0)
            .map(|p| nines(p.0))
            .fold(1.0, f64::max)
            .ceil()
            .min(NINES_MAX);
        let tx = |x: f64| match self.x_scale {
            XScale::Linear => x,
            XScale::Nines if x >= 1.0 => nines_edge,
            XScale::Nines => nines(x),
        };
        let x_max = match self.x_scale {
            XScale::Linear => points().map(|p| p.0).fold(0.0, f64::max),
            XScale::Nines => nines_edge,
        };
        let y_max = points().map(|p| p.1).fold(0.0, f64::max);
        let x_ticks: Vec<(f64, String)> = match self.x_scale {
            XScale::Linear => nice_ticks(x_max, 8)
                .into_iter()
                .map(|v| (v, format_tick(v)))
                .collect(),
            XScale::Nines => {
                let labels = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"];
                (0..=x_max as usize)
                    .map(|i| (i as f64, labels[i.min(labels.len() - 1)].to_string()))
                    .collect()
            }
        };
        let y_ticks = nice_ticks(y_max, 6);
        let x_end = x_ticks.last().map(|t| t.0).unwrap_or(1.0).max(f64::EPSILON);
        let y_end = y_ticks.last().copied().unwrap_or(1.0).max(f64::EPSILON);
        let px = |x: f64| LEFT + tx(x).clamp(0.0, x_end) / x_end * plot_w;
        let px_raw = |x: f64| LEFT + x / x_end * plot_w;
        let py = |y: f64| TOP + plot_h - y.clamp(0.0, y_end) / y_end * plot_h;

        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(
            s,
            r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            escape(&self.title)
        );
        for (x, label) in &x_ticks {
            let x = px_raw(*x);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP + plot_h,
                TOP + plot_h + 16.0,
                escape(label)
            );
        }
        for y in &y_ticks {
            let yp = py(*y);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{yp:.1}" x2="{:.1}" y2="{yp:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                yp + 4.0,
                format_tick(*y)
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 10.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
            TOP + plot_h / 2.0,
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );
        let mut legend: Vec<(&str, &str, bool)> = Vec::new();
        for series in &self.series {
            let colour = COLOURS[series.colour % COLOURS.len()];
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let path: Vec<String> = series
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{}"/>"#,
                path.join(" ")
            );
            if !legend.iter().any(|(name, _, _)| *name == series.name) {
                legend.push((&series.name, colour, series.dashed));
            }
        }
        for (i, (name, colour, dashed)) in legend.into_iter().enumerate() {
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let lx = LEFT + plot_w + 12.0;
            let dash = if dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="3"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                lx + 18.0,
                lx + 24.0,
                ly + 4.0,
                escape(name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(scale: XScale, points: Vec<(f64, f64)>) -> Chart {
        Chart {
            title: "a <b> & \"c\"".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_scale: scale,
            series: vec![Series {
                name: "s1".into(),
                points,
                colour: 0,
                dashed: false,
            }],
        }
    }

    #[test]
    fn escapes_text() {
        assert_eq!(escape("<a&'b\">"), "&lt;a&amp;&#39;b&quot;&gt;");
        let svg = chart(XScale::Linear, vec![(0.0, 1.0), (1.0, 2.0)]).to_svg();
        assert!(svg.contains("a &lt;b&gt; &amp; &quot;c&quot;"));
        assert!(!svg.contains("<b>"));
    }

    #[test]
    fn draws_one_polyline_per_series_inside_the_plot() {
        let svg = chart(XScale::Linear, vec![(0.0, 0.0), (10.0, 5.0)]).to_svg();
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        let points = svg
            .split("points=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("points");
        for pair in points.split(' ') {
            let (x, y) = pair.split_once(',').expect("x,y");
            let (x, y): (f64, f64) = (x.parse().expect("x"), y.parse().expect("y"));
            assert!((LEFT..=WIDTH - RIGHT).contains(&x), "x {x}");
            assert!((TOP..=HEIGHT - BOTTOM).contains(&y), "y {y}");
        }
    }

    #[test]
    fn nines_axis() {
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(0.9) - 1.0).abs() < 1e-9);
        assert!((nines(0.999) - 3.0).abs() < 1e-9);
        assert_eq!(nines(1.0), NINES_MAX);
        let svg = chart(XScale::Nines, vec![(0.5, 1.0), (0.99, 3.0), (1.0, 9.0)]).to_svg();
        assert!(svg.contains(">99%<"));
        assert!(
            !svg.contains(">99.9%<"),
            "the axis ends at the first nine past the data"
        );
    }

    #[test]
    fn ticks_are_round_and_cover_the_max() {
        assert_eq!(nice_ticks(10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = nice_ticks(73.0, 6);
        assert!(*t.last().expect("ticks") >= 73.0);
        assert!(t.len() <= 10);
        assert_eq!(nice_ticks(0.0, 5), vec![0.0, 1.0]);
        assert_eq!(format_tick(0.25), "0.25");
        assert_eq!(format_tick(2.5), "2.5");
        assert_eq!(format_tick(200.0), "200");
    }
}
