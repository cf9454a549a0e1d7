//! `error_responses`: the server answered some requests with an error (4xx/5xx), so what was
//! measured, for those, is an error page and not the application's normal work.

use super::*;

/// At least this share of the responses (and at least one) makes the finding: a rare error
/// among thousands of pages changes no latency figure, but is still worth a line once it is one
/// in a hundred.
const ERROR_SHARE: f64 = 0.01;

/// When at least this share of the responses were errors, the measurement *is* of error pages:
/// the finding ranks first, whatever the others explain.
pub(crate) const MOSTLY_ERRORS: f64 = 0.5;

/// The share of the responses that were errors, when there were responses.
pub(crate) fn error_share(e: &Evidence) -> Option<f64> {
    let r = e.responses.as_ref()?;
    let total = r.total();
    (total > 0).then(|| r.error_count() as f64 / total as f64)
}

/// Error responses: the request steps got statuses of 400 and above. An error page is usually
/// made without the work a real answer needs (or with a different one: a 5xx may wait for a
/// timed-out back-end), so its latency says little about the application's. The finding
/// explains no time; it says what the figures are of, and ranks first when most responses
/// were errors.
pub fn error_responses(e: &Evidence) -> Option<Diagnosis> {
    let r = e.responses.as_ref()?;
    let share = error_share(e)?;
    if r.error_count() == 0 || share < ERROR_SHARE {
        return None;
    }
    let codes: Vec<String> = r
        .errors()
        .map(|(status, n)| format!("{status} × {n}"))
        .collect();
    let ok: u64 = r.total() - r.error_count();
    let mut evidence = vec![format!(
        "{} of {} answered with an error: {}",
        r.error_count(),
        count(r.total(), "response"),
        codes.join(", ")
    )];
    evidence.push(if ok == 0 {
        "no response was a page the application made normally: every latency figure here is an error page's".into()
    } else {
        format!(
            "{} answered 2xx/3xx; the latency figures mix both",
            count(ok, "response")
        )
    });
    let forbidden = r.errors().any(|(s, _)| s == 401 || s == 403);
    let missing = r.errors().any(|(s, _)| s == 404 || s == 410);
    let server = r.errors().any(|(s, _)| s >= 500);
    let fix = match (forbidden, missing, server) {
        (true, _, _) => {
            "the server refuses the request (401/403): check the URL's credentials and the server's access rules (for nginx: the files' permissions for its worker user, `deny` rules), then measure a URL that answers 2xx"
        }
        (_, true, _) => {
            "the URL does not exist on the server (404): measure a URL that answers 2xx"
        }
        (_, _, true) => {
            "the server fails (5xx): read its error log (a back-end down or timing out), then measure again"
        }
        _ => {
            "measure a URL the server answers with 2xx (the request was refused as malformed or not allowed)"
        }
    };
    Some(Diagnosis {
        rule: RuleId::ErrorResponses,
        title: format!(
            "the server answered {:.0}% of the requests with errors ({}): the latency measured is that of error pages",
            share * 100.0,
            codes.join(", ")
        ),
        explains_ns: 0,
        confidence: 0.95,
        side: Side::Server,
        evidence,
        fix: fix.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
