//! Verified and spoofed crawlers. A request is crawler X when its address is in the list of X's
//! published ranges and its User-Agent carries one of X's tokens (`lists.tokens`, what the
//! operator documents: Google's `Googlebot`, Bing's `bingbot`); a User-Agent that claims a known
//! crawler from an address in none of the claimed crawlers' ranges is a spoofed crawler. The
//! operators say so themselves: a User-Agent alone proves nothing.

use std::collections::BTreeMap;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

/// Every crawler list's tokens in one automaton, each token mapped to the lists that carry it.
#[derive(Debug)]
pub struct CrawlerTokens {
    automaton: AhoCorasick,
    /// Bit `i` for list `i` of the table, by token.
    lists_of: Vec<u32>,
    /// The crawler lists (bit `i` for list `i`): every token's lists together.
    pub lists: u32,
}

/// What a request claims and is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Crawl {
    /// Bit `i` when the request is list `i`'s verified crawler.
    pub verified: u32,
    /// It claims a crawler whose ranges do not hold its address, and is none of those it claims.
    pub spoofed: bool,
}

impl CrawlerTokens {
    /// `None` when no list has tokens. `names` are the table's lists in order.
    pub fn build(names: &[String], tokens: &BTreeMap<String, Vec<String>>) -> Option<Self> {
        let mut patterns: Vec<String> = Vec::new();
        let mut lists_of: Vec<u32> = Vec::new();
        for (list, list_tokens) in tokens {
            let Some(i) = names.iter().position(|n| n == list).filter(|i| *i < 32) else {
                continue;
            };
            for token in list_tokens {
                let token = token.to_ascii_lowercase();
                match patterns.iter().position(|p| *p == token) {
                    Some(at) => {
                        if let Some(bits) = lists_of.get_mut(at) {
                            *bits |= 1 << i;
                        }
                    }
                    None => {
                        patterns.push(token);
                        lists_of.push(1 << i);
                    }
                }
            }
        }
        if patterns.is_empty() {
            return None;
        }
        let automaton = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(&patterns)
            .ok()?;
        let lists = lists_of.iter().fold(0, |acc, bits| acc | bits);
        Some(CrawlerTokens {
            automaton,
            lists_of,
            lists,
        })
    }

    /// What a request with this User-Agent (its first bytes, as the binding reads it) from an
    /// address in `lists` (bit `i` for list `i`) is.
    pub fn crawl(&self, user_agent: &str, lists: u32) -> Crawl {
        let ua = crate::crypto::bound_user_agent(user_agent);
        let claimed = self
            .automaton
            .find_overlapping_iter(ua)
            .filter_map(|m| self.lists_of.get(m.pattern().as_usize()))
            .fold(0u32, |acc, bits| acc | bits);
        let verified = claimed & lists;
        Crawl {
            verified,
            spoofed: claimed != 0 && verified == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crawler_is_its_token_from_its_ranges() {
        let names: Vec<String> = ["tor", "googlebot", "bingbot"].map(String::from).to_vec();
        let tokens = BTreeMap::from([
            ("googlebot".to_owned(), vec!["Googlebot".to_owned()]),
            ("bingbot".to_owned(), vec!["bingbot".to_owned()]),
        ]);
        let t = CrawlerTokens::build(&names, &tokens).unwrap();
        let google = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
        assert_eq!(
            t.crawl(google, 0b010),
            Crawl {
                verified: 0b010,
                spoofed: false
            }
        );
        assert_eq!(
            t.crawl(google, 0b001),
            Crawl {
                verified: 0,
                spoofed: true
            }
        );
        assert_eq!(
            t.crawl(google, 0b100),
            Crawl {
                verified: 0,
                spoofed: true
            }
        );
        assert_eq!(t.crawl("Mozilla/5.0 BINGBOT/2.0", 0b100).verified, 0b100);
        // Claiming two: whichever holds the address.
        assert_eq!(
            t.crawl("Googlebot bingbot", 0b100),
            Crawl {
                verified: 0b100,
                spoofed: false
            }
        );
        assert_eq!(t.crawl("Mozilla/5.0 Chrome/140", 0b111), Crawl::default());
        assert!(CrawlerTokens::build(&names, &BTreeMap::new()).is_none());
    }
}
