//! The filter's own answers: a challenge (the proof-of-work page, or the refresh page for
//! clients without JavaScript), a denial, and the refusal of a host no DNS name can be.

use super::{
    Action, DECISION_HEADER, Filter, MITIGATED_HEADER, Now, Request, VERIFY_PATH, VerifyQuery,
};
use crate::crypto::{self, Binding, ChallengeParams, Keys};
use crate::page::{self, PageData};
use crate::policy::{ChallengeKind, Verdict};

use super::decide::Labels;

impl Filter {
    /// A challenge of this kind and difficulty (0 for `refresh`) for the bound client, coming
    /// back to `return_to` once solved.
    #[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
    pub(super) fn challenge(
        &self,
        keys: &Keys,
        req: &Request<'_>,
        binding: &Binding,
        difficulty: u8,
        kind: ChallengeKind,
        return_to: &str,
        now: Now,
    ) -> Action {
        let params = ChallengeParams {
            issued: now.secs,
            expiry: now.secs.saturating_add(self.config.challenge_ttl_secs),
            difficulty,
            salt: self.salts.next(),
        };
        let challenge = crypto::issue_challenge(keys, binding, &params);
        let lang = page::negotiate(req.header("accept-language"));
        let mut headers = vec![
            (MITIGATED_HEADER.to_owned(), "challenge".to_owned()),
            ("cache-control".to_owned(), "no-store".to_owned()),
            ("x-content-type-options".to_owned(), "nosniff".to_owned()),
            ("referrer-policy".to_owned(), "same-origin".to_owned()),
            ("content-language".to_owned(), lang.tag().to_owned()),
        ];
        let html = page::wants_html(req.header("accept"));
        let content_type = if html {
            "text/html; charset=utf-8"
        } else {
            "text/plain; charset=utf-8"
        };
        headers.push(("content-type".to_owned(), content_type.to_owned()));
        let body = match (kind, html) {
            (ChallengeKind::Pow, true) => {
                headers.push(("content-security-policy".to_owned(), page::csp().to_owned()));
                page::render_html(
                    lang,
                    &PageData {
                        challenge_hex: &crypto::hex(&challenge),
                        salt_hex: &format!("{:016x}", params.salt),
                        issued: params.issued,
                        expiry: params.expiry,
                        difficulty,
                        return_to,
                        verify_path: VERIFY_PATH,
                    },
                )
                .into_bytes()
            }
            (ChallengeKind::Pow, false) => page::render_plain(lang).as_bytes().to_vec(),
            (ChallengeKind::Refresh, _) => {
                // No work to do: the answer is the challenge itself, accepted once the delay
                // has passed (the verify endpoint checks it against `issued`).
                let answer = VerifyQuery {
                    challenge,
                    issued: params.issued,
                    expiry: params.expiry,
                    difficulty: 0,
                    salt: params.salt,
                    nonce: 0,
                    return_to: return_to.to_owned(),
                };
                let url = format!("{VERIFY_PATH}?{}", answer.to_query());
                let delay = self.config.refresh_delay_secs;
                if html {
                    headers.push((
                        "content-security-policy".to_owned(),
                        page::CSP_NO_SCRIPT.to_owned(),
                    ));
                    page::render_refresh(lang, delay, &url).into_bytes()
                } else {
                    headers.push(("retry-after".to_owned(), delay.to_string()));
                    page::render_refresh_plain(lang, delay, &url).into_bytes()
                }
            }
        };
        Action::Respond {
            status: 403,
            headers,
            body,
        }
    }
}

/// The answer of a `deny` rule: 403, `pow-mitigated: deny`, the rule's name.
pub(super) fn denied(labels: &Labels) -> Action {
    Action::Respond {
        status: 403,
        headers: vec![
            (MITIGATED_HEADER.to_owned(), "deny".to_owned()),
            (
                DECISION_HEADER.to_owned(),
                labels.decision(Verdict::Denied).to_string(),
            ),
            ("cache-control".to_owned(), "no-store".to_owned()),
            (
                "content-type".to_owned(),
                "text/plain; charset=utf-8".to_owned(),
            ),
            ("x-content-type-options".to_owned(), "nosniff".to_owned()),
        ],
        body: format!("denied by rule {}\n", labels.name).into_bytes(),
    }
}

/// The answer to a request that must pay but whose host no DNS name can be: nothing can be
/// bound to it, so no challenge it could solve and no cookie it could hold.
pub(super) fn overlong_host() -> Action {
    Action::Respond {
        status: 400,
        headers: vec![
            ("cache-control".to_owned(), "no-store".to_owned()),
            (
                "content-type".to_owned(),
                "text/plain; charset=utf-8".to_owned(),
            ),
            ("x-content-type-options".to_owned(), "nosniff".to_owned()),
        ],
        body: b"pow-filter: the host name is longer than a DNS name can be\n".to_vec(),
    }
}
