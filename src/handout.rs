//! A lesson as a printable page (issue 38): its title and summary, then
//! each step's picture, title, narration and question, with the answers at
//! the end so a class can predict first. For students without a device:
//! `tinygpt handout --lesson NAME --out FILE.html` takes each step's
//! picture from the app, headless, and writes this page beside them. The
//! page speaks the current language ([`crate::i18n`]; `--lang`).

use crate::chart::escape;
use crate::lesson::Lesson;

/// The page for `lesson` (`name`: how it is opened), with `pictures[k]` the
/// file name of step k's picture, relative to the page.
pub fn html(lesson: &Lesson, name: &str, pictures: &[String]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        r#"<!doctype html>
<html lang="{lang}">
<head>
<meta charset="utf-8">
<title>{title} · TinyGPT Explainer</title>
<style>
  body {{ font: 16px/1.5 "DejaVu Serif", Georgia, "Noto Serif CJK SC", "Noto Sans CJK SC", serif; color: #111; background: #fff;
         max-width: 46em; margin: 2em auto; padding: 0 1em; }}
  h1 {{ font-size: 1.9em; margin-bottom: 0.2em; }}
  .summary {{ font-size: 1.1em; color: #333; }}
  .how {{ color: #555; font-size: 0.9em; }}
  section {{ page-break-inside: avoid; break-inside: avoid; margin: 2em 0; }}
  h2 {{ font-size: 1.35em; margin: 0.4em 0; }}
  img {{ width: 100%; border: 1px solid #999; }}
  .question {{ border-left: 4px solid #b35806; padding: 0.3em 0.8em; background: #fdf3e7; }}
  .question ul {{ list-style: none; padding-left: 0.2em; }}
  .question li::before {{ content: "☐  "; }}
  .answers {{ page-break-before: always; break-before: page; }}
  @media print {{ body {{ margin: 0; max-width: none; }} }}
</style>
</head>
<body>
<h1>{title}</h1>
<p class="summary">{summary}</p>
<p class="how">{how} <code>tinygpt app --lesson {name}{lang_flag}</code>.</p>
"#,
        lang = crate::i18n::language().code(),
        how = escape(&crate::t!("handout-how", steps = lesson.steps.len())),
        lang_flag = match crate::i18n::language() {
            crate::i18n::Language::English => String::new(),
            other => format!(" --lang {}", other.code()),
        },
        title = escape(&lesson.title),
        summary = escape(&lesson.summary),
        name = escape(name),
    ));
    let mut answers = Vec::new();
    for (k, step) in lesson.steps.iter().enumerate() {
        out.push_str(&format!(
            "<section>\n<h2>{}. {}</h2>\n",
            k + 1,
            escape(&step.title)
        ));
        if let Some(picture) = pictures.get(k) {
            out.push_str(&format!(
                "<img src=\"{}\" alt=\"{}\">\n",
                escape(picture),
                escape(&crate::t!(
                    "handout-alt",
                    step = k + 1,
                    title = step.title.as_str()
                )),
            ));
        }
        for paragraph in step.narration.split("\n\n") {
            out.push_str(&format!("<p>{}</p>\n", escape(paragraph.trim())));
        }
        if let Some(q) = &step.question {
            out.push_str(&format!(
                "<div class=\"question\"><p><strong>{}</strong> {}</p>\n<ul>\n",
                escape(&crate::t!("handout-predict")),
                escape(&q.ask)
            ));
            for choice in &q.choices {
                out.push_str(&format!("<li>{}</li>\n", escape(choice)));
            }
            out.push_str("</ul></div>\n");
            answers.push((k, q));
        }
        out.push_str("</section>\n");
    }
    if !answers.is_empty() {
        out.push_str(&format!(
            "<section class=\"answers\">\n<h2>{}</h2>\n<ol>\n",
            escape(&crate::t!("handout-answers"))
        ));
        for (k, q) in answers {
            out.push_str(&format!(
                "<li value=\"{}\"><strong>{}</strong> {}</li>\n",
                k + 1,
                escape(q.choices.get(q.answer).map_or("", String::as_str)),
                escape(&q.why)
            ));
        }
        out.push_str("</ol>\n</section>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_question_and_answer_is_on_the_page_escaped() {
        for (name, text) in crate::lesson::BUILTIN_LESSONS {
            let lesson = Lesson::parse(name, text).unwrap();
            let pictures: Vec<String> = (1..=lesson.steps.len())
                .map(|k| format!("p-{k}.png"))
                .collect();
            let page = html(&lesson, name, &pictures);
            for (k, step) in lesson.steps.iter().enumerate() {
                assert!(
                    page.contains(&escape(&step.title)),
                    "{name}: step {}",
                    k + 1
                );
                assert!(page.contains(&format!("src=\"p-{}.png\"", k + 1)), "{name}");
                if let Some(q) = &step.question {
                    assert!(page.contains(&escape(&q.ask)), "{name}: step {}", k + 1);
                    assert!(page.contains(&escape(&q.why)), "{name}: step {}", k + 1);
                }
            }
            // The text is escaped: no narration opens a tag of its own.
            assert_eq!(
                page.matches("<section").count(),
                lesson.steps.len() + usize::from(page.contains("Answers")),
                "{name}"
            );
        }
    }
}
