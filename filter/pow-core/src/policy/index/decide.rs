//! A request decided against the compiled rules: each condition narrows the rules still in the
//! running, cheapest first, and a condition is looked at only while one of those rules tests it.
//! So a request costs the conditions its candidates have, not every condition some rule has: a
//! header lookup, the User-Agent automaton or a signature check is skipped once no rule left
//! needs it. The first rule every condition lets through decides, whatever the order.

use super::super::path::{lenient_forms, walk};
use std::cell::RefCell;

use super::memo::Key;
use super::{Bits, CompiledPolicy, Field, KeyHash, Keyed, Memo, meet};

/// What the policy reads of a request, each asked for only when a rule still in the running
/// tests it (the filter computes the costly ones, a crawler's check and a signature's, then).
pub trait Facts {
    /// `:authority`, as sent.
    fn host(&self) -> &str;
    fn method(&self) -> &str;
    /// The path without its query.
    fn path(&self) -> &str;
    fn user_agent(&self) -> &str;
    fn accept(&self) -> Option<&str>;
    /// The first value of a header the rules test, by its lowercase name.
    fn header(&self, name: &str) -> Option<&str>;
    /// Bit `i` for list `i` of the table.
    fn lists(&self) -> u32;
    /// Bit `i` for list `i` when the request is that list's verified crawler.
    fn crawlers(&mut self) -> u32;
    /// The User-Agent names a crawler whose ranges do not hold the address.
    fn spoofed_crawler(&mut self) -> bool;
    /// The index of the trusted agent whose signature verified.
    fn signed_agent(&mut self) -> Option<usize>;
}

/// What the policy needs of a request, gathered beforehand (the tests and the fuzz target's
/// reference): [`Facts`] with a header lookup.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features<'r> {
    /// `:authority`, as sent.
    pub host: &'r str,
    pub method: &'r str,
    /// The path without its query.
    pub path: &'r str,
    pub user_agent: &'r str,
    pub accept: Option<&'r str>,
    /// Bit `i` for list `i` of the table.
    pub lists: u32,
    /// Bit `i` for list `i` when the request is that list's verified crawler.
    pub crawlers: u32,
    /// The User-Agent names a crawler whose ranges do not hold the address.
    pub spoofed_crawler: bool,
    /// The index of the trusted agent whose signature verified.
    pub signed_agent: Option<usize>,
}

/// [`Features`] and a header lookup, as [`Facts`].
struct Gathered<'f, 'r> {
    features: &'f Features<'r>,
    header: &'f dyn Fn(&str) -> Option<&'r str>,
}

impl Facts for Gathered<'_, '_> {
    fn host(&self) -> &str {
        self.features.host
    }
    fn method(&self) -> &str {
        self.features.method
    }
    fn path(&self) -> &str {
        self.features.path
    }
    fn user_agent(&self) -> &str {
        self.features.user_agent
    }
    fn accept(&self) -> Option<&str> {
        self.features.accept
    }
    fn header(&self, name: &str) -> Option<&str> {
        (self.header)(name)
    }
    fn lists(&self) -> u32 {
        self.features.lists
    }
    fn crawlers(&mut self) -> u32 {
        self.features.crawlers
    }
    fn spoofed_crawler(&mut self) -> bool {
        self.features.spoofed_crawler
    }
    fn signed_agent(&mut self) -> Option<usize> {
        self.features.signed_agent
    }
}

/// The rules still in the running (`acc`), the set the condition being read lets through
/// (`found`), and how many words of a [`Bits`] the policy uses: every operation stops there, so
/// a policy of a few rules never copies the sets whole.
struct Running {
    acc: Bits,
    found: Bits,
    words: usize,
}

impl Running {
    /// Whether a rule still in the running tests the condition whose `wild` this is.
    #[inline]
    fn tests(&self, wild: &Bits) -> bool {
        self.acc
            .0
            .iter()
            .zip(&wild.0)
            .take(self.words)
            .any(|(a, w)| a & !w != 0)
    }

    /// Starts reading a condition: what it lets through so far are the rules without it.
    #[inline]
    fn start(&mut self, wild: &Bits) {
        for (f, w) in self.found.0.iter_mut().zip(&wild.0).take(self.words) {
            *f = *w;
        }
    }

    /// The condition lets these rules through too.
    #[inline]
    fn add(&mut self, rules: &Bits) {
        self.found.or(rules, self.words);
    }

    /// The rules of `key` in `field`, which the condition lets through too.
    #[inline]
    fn meet<K, Q>(&mut self, field: &Field<K>, key: &Q)
    where
        K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        meet(field, key, &mut self.found, self.words);
    }

    /// Keeps the rules the condition let through; whether any is left.
    #[inline]
    fn narrow(&mut self) -> bool {
        self.acc.and(&self.found, self.words)
    }

    /// Keeps the rules of `rules`; whether any is left.
    #[inline]
    fn narrow_to(&mut self, rules: &Bits) -> bool {
        self.acc.and(rules, self.words)
    }
}

impl CompiledPolicy {
    /// The index of the first rule every condition of which the request meets.
    pub fn decide<'r>(
        &self,
        f: &Features<'r>,
        header: &dyn Fn(&str) -> Option<&'r str>,
    ) -> Option<usize> {
        self.decide_facts(&mut Gathered {
            features: f,
            header,
        })
    }

    /// [`CompiledPolicy::decide`], reading the request through `facts` as the conditions need
    /// it: the lists and the method first (a bitset, a short key), then the host, the headers,
    /// `Accept`, the path, the User-Agent automaton, the crawler checks, and the signature last.
    pub fn decide_facts(&self, facts: &mut dyn Facts) -> Option<usize> {
        if self.rules.is_empty() {
            return None;
        }
        let mut run = Running {
            acc: self.all,
            found: Bits::EMPTY,
            words: self.words,
        };
        let left = self.narrow_by_request(&mut run, facts)
            && self.narrow_by_client(&mut run, facts)
            && self.narrow_by_identity(&mut run, facts);
        if !left {
            return None;
        }
        run.acc.first(run.words).filter(|i| *i < self.rules.len())
    }

    /// The conditions read from the request as it came: lists, method, host, headers, Accept,
    /// path. `false` when no rule is left.
    fn narrow_by_request(&self, run: &mut Running, facts: &dyn Facts) -> bool {
        if run.tests(&self.lists.wild) {
            self.indexed(run, &self.lists, facts.lists(), None);
            if !run.narrow() {
                return false;
            }
        }
        if run.tests(&self.method.wild) {
            run.start(&self.method.wild);
            run.meet(&self.method, facts.method());
            if !run.narrow() {
                return false;
            }
        }
        if run.tests(&self.host_wild) {
            let authority = facts.host();
            let read = |run: &mut Running| self.hosts(run, authority);
            if !narrow_remembered(&self.host_memo, run, authority.as_bytes(), read) {
                return false;
            }
        }
        for h in &self.headers {
            if !run.tests(&h.field.wild) {
                continue;
            }
            run.start(&h.field.wild);
            match facts.header(&h.name) {
                Some(value) => {
                    run.add(&h.present);
                    run.meet(&h.field, value.trim_matches([' ', '\t']));
                }
                None => run.add(&h.absent),
            }
            if !run.narrow() {
                return false;
            }
        }
        if run.tests(&self.accept.wild) {
            run.start(&self.accept.wild);
            for media in accepted_media_types(facts.accept()) {
                run.meet(&self.accept, media.as_str());
            }
            if !run.narrow() {
                return false;
            }
        }
        if run.tests(&self.path_wild) {
            self.paths(run, facts.path());
            return run.narrow();
        }
        true
    }

    /// The User-Agent's substrings, then the crawler checks (which read it too). `false` when
    /// no rule is left.
    fn narrow_by_client(&self, run: &mut Running, facts: &mut dyn Facts) -> bool {
        if run.tests(&self.user_agent.wild) {
            let ua = crate::crypto::bound_user_agent(facts.user_agent());
            let read = |run: &mut Running| self.user_agent_matches(run, ua);
            if !narrow_remembered(&self.user_agent_memo, run, ua, read) {
                return false;
            }
        }
        if run.tests(&self.crawler.wild) {
            self.indexed(
                run,
                &self.crawler,
                facts.crawlers(),
                Some(&self.crawler_any),
            );
            if !run.narrow() {
                return false;
            }
        }
        if run.tests(&self.spoofed.wild) {
            run.start(&self.spoofed.wild);
            run.meet(&self.spoofed, &facts.spoofed_crawler());
            if !run.narrow() {
                return false;
            }
        }
        true
    }

    /// Reads the User-Agent condition by the automaton of the rules' substrings.
    fn user_agent_matches(&self, run: &mut Running, ua: &[u8]) {
        run.start(&self.user_agent.wild);
        if let Some(ac) = &self.patterns {
            for m in ac.find_overlapping_iter(ua) {
                run.meet(&self.user_agent, &m.pattern().as_usize());
            }
        }
    }

    /// The signed agent: a signature check, the costliest, only for the rules still left.
    fn narrow_by_identity(&self, run: &mut Running, facts: &mut dyn Facts) -> bool {
        if !run.tests(&self.agent.wild) {
            return true;
        }
        run.start(&self.agent.wild);
        if let Some(agent) = facts.signed_agent() {
            run.add(&self.agent_any);
            run.meet(&self.agent, &agent);
        }
        run.narrow()
    }

    /// Reads the host condition: exact names, then each `*.` suffix (a proper suffix at a label
    /// boundary), the port and one trailing dot aside, case folded. The suffixes, when a rule
    /// names any, are hashed on one walk from the host's end.
    fn hosts(&self, run: &mut Running, authority: &str) {
        run.start(&self.host_wild);
        let host = strip_port(authority);
        let host = host.strip_suffix('.').unwrap_or(host).as_bytes();
        if host.len() > crate::crypto::MAX_HOST_LEN {
            return;
        }
        // The tables hold lowercase names: a name's bytes against the host's, case folded.
        let exact = KeyHash::of_folded_words(host);
        if let Some(bits) = self.host_exact.get(exact, |k| k.eq_ignore_ascii_case(host)) {
            run.add(bits);
        }
        if self.host_suffix.is_empty() {
            return;
        }
        let mut hash = KeyHash::START;
        for (at, b) in host.iter().enumerate().rev() {
            if *b == b'.'
                && let Some(suffix) = host.get(at + 1..)
                && let Some(bits) = self
                    .host_suffix
                    .get(hash, |k| k.eq_ignore_ascii_case(suffix))
            {
                run.add(bits);
            }
            hash = hash.add(b.to_ascii_lowercase());
        }
    }

    /// Reads the path condition: `allow` rules on a plain path only; the others on the path and
    /// on the forms lenient origins read it as. One walk over the path says whether it is plain
    /// and hashes its prefixes.
    fn paths(&self, run: &mut Running, path: &str) {
        run.start(&self.path_wild);
        let words = run.words;
        // What the `allow` rules give, kept only if the path turns out plain.
        let mut allowed = (!(self.allow_path_exact.is_empty()
            && self.allow_path_prefix.is_empty()))
        .then_some(Bits::EMPTY);
        let found = &mut run.found;
        let walked = walk(path.as_bytes(), |prefix, hash| {
            if let Some(allowed) = &mut allowed {
                lookup(&self.allow_path_prefix, hash, prefix, allowed, words);
            }
            lookup(&self.other_path_prefix, hash, prefix, found, words);
        });
        let whole = path.as_bytes();
        lookup(&self.other_path_exact, walked.hash, whole, found, words);
        if let Some(mut allowed) = allowed
            && walked.plain
            && path.len() <= crate::bypass::MAX_BYPASS_PATH
        {
            lookup(
                &self.allow_path_exact,
                walked.hash,
                whole,
                &mut allowed,
                words,
            );
            found.or(&allowed, words);
        }
        let lenient = !(self.other_path_exact.is_empty() && self.other_path_prefix.is_empty());
        if lenient && (!walked.plain || walked.upper) {
            for form in lenient_forms(path) {
                let form = form.as_bytes();
                let walked = walk(form, |prefix, hash| {
                    lookup(&self.other_path_prefix, hash, prefix, found, words);
                });
                lookup(&self.other_path_exact, walked.hash, form, found, words);
            }
        }
    }

    /// Reads an indexed condition (lists, crawlers) for the set bits of `present`.
    fn indexed(&self, run: &mut Running, field: &Field<usize>, present: u32, any: Option<&Bits>) {
        run.start(&field.wild);
        if present != 0 {
            if let Some(any) = any {
                run.add(any);
            }
            for i in 0..32usize {
                if present & (1 << i) != 0 {
                    run.meet(field, &i);
                }
            }
        }
    }
}

/// Keeps the rules a condition lets through for `key`, its value in this request: remembered
/// in `memo` for the last values seen, else read by `read` (and remembered).
fn narrow_remembered(
    memo: &RefCell<Memo>,
    run: &mut Running,
    key: &[u8],
    read: impl FnOnce(&mut Running),
) -> bool {
    let Ok(mut memo) = memo.try_borrow_mut() else {
        read(run);
        return run.narrow();
    };
    let key = Key::new(key);
    if let Some(rules) = memo.get(key) {
        return run.narrow_to(rules);
    }
    read(run);
    memo.put(key, run.found);
    run.narrow()
}

/// The rules of `key` (hashed `hash`) in `table`, added to `found`.
fn lookup(table: &Keyed, hash: KeyHash, key: &[u8], found: &mut Bits, words: usize) {
    if let Some(bits) = table.get(hash, |k| k == key) {
        found.or(bits, words);
    }
}

/// The host of an `:authority`, without its port (`[v6]:port` keeps its brackets): what
/// follows its last `:`, when that is digits only.
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .and_then(|end| authority.get(..=end))
            .unwrap_or(authority);
    }
    let bytes = authority.as_bytes();
    let digits = bytes
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let colon = bytes.len() - digits;
    match colon
        .checked_sub(1)
        .and_then(|at| bytes.get(at).map(|b| (at, *b)))
    {
        Some((at, b':')) => authority.get(..at).unwrap_or(authority),
        _ => authority,
    }
}

/// The media types an `Accept` header names (parameters dropped, lowercased), its first 16
/// items of its first 1 KiB, as the page's negotiation reads it.
fn accepted_media_types(accept: Option<&str>) -> impl Iterator<Item = String> + '_ {
    let text = accept.unwrap_or("");
    let text = text
        .get(..text.len().min(crate::page::MAX_NEGOTIATED))
        .unwrap_or("");
    text.split(',').take(16).filter_map(|item| {
        let media = item.split(';').next()?.trim_matches([' ', '\t']);
        (!media.is_empty()).then(|| media.to_ascii_lowercase())
    })
}

#[cfg(test)]
mod tests {
    use super::strip_port;

    #[test]
    fn a_port_is_digits_after_the_last_colon() {
        for (authority, host) in [
            ("example.org:8443", "example.org"),
            ("example.org:", "example.org"),
            ("example.org", "example.org"),
            ("example.org:8a", "example.org:8a"),
            ("a:b:80", "a:b"),
            (":80", ""),
            ("8080", "8080"),
            ("", ""),
            ("[2001:db8::1]:443", "[2001:db8::1]"),
            ("[2001:db8::1]", "[2001:db8::1]"),
        ] {
            assert_eq!(strip_port(authority), host, "{authority}");
        }
    }
}
