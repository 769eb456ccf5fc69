//! A command line of a document read as a POSIX shell reads it, far enough to know which
//! programs run with which words: quotes, escapes, comments, pipes and lists (`|`, `&&`, `||`,
//! `;`, `&`), redirections, and command substitutions `$(...)`, whose commands are commands too
//! (`eval "$(make kubeconfig)"` runs `make kubeconfig`). Expansions are left as written: a word
//! holding `$` or a `<placeholder>` is the reader's to fill in.

/// The simple commands of `line`, each as its words, substitutions' commands after the
/// command that holds them.
pub fn commands(line: &str) -> Vec<Vec<String>> {
    let mut parser = Parser::default();
    parser.run(line);
    parser.finish_command();
    let mut all = parser.commands;
    for inner in parser.substitutions {
        all.extend(commands(&inner));
    }
    all
}

#[derive(Default)]
struct Parser {
    commands: Vec<Vec<String>>,
    substitutions: Vec<String>,
    words: Vec<String>,
    word: Option<String>,
    /// The next word is the file of a redirection, not an argument.
    redirect: bool,
}

impl Parser {
    fn run(&mut self, line: &str) {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            match c {
                _ if c.is_whitespace() => self.finish_word(),
                '#' if self.word.is_none() => return,
                '\'' => {
                    let end = find(&chars, i + 1, |c| c == '\'');
                    self.push_str(&chars[i + 1..end]);
                    i = end;
                }
                '"' => i = self.double_quoted(&chars, i + 1),
                '\\' => {
                    i += 1;
                    if let Some(&next) = chars.get(i) {
                        self.push(next);
                    }
                }
                '$' if chars.get(i + 1) == Some(&'(') => i = self.substitution(&chars, i),
                '|' | '&' | ';' => self.finish_command(),
                '>' | '<' => {
                    // `2>file`: the descriptor is part of the redirection, not a word.
                    if self
                        .word
                        .as_deref()
                        .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit()))
                    {
                        self.word = None;
                    }
                    self.finish_word();
                    self.redirect = true;
                    while matches!(chars.get(i + 1), Some('>' | '&')) {
                        i += 1;
                    }
                }
                _ => self.push(c),
            }
            i += 1;
        }
    }

    /// The text of a double-quoted string from `start`; returns the index of its closing quote.
    fn double_quoted(&mut self, chars: &[char], start: usize) -> usize {
        self.word.get_or_insert_with(String::new);
        let mut i = start;
        while i < chars.len() && chars[i] != '"' {
            match chars[i] {
                '\\' if i + 1 < chars.len() => {
                    i += 1;
                    self.push(chars[i]);
                }
                '$' if chars.get(i + 1) == Some(&'(') => i = self.substitution(chars, i),
                c => self.push(c),
            }
            i += 1;
        }
        i
    }

    /// A `$(...)` from `start` (its `$`): its inside is kept for [`commands`], the word keeps it
    /// as written; returns the index of its closing parenthesis.
    fn substitution(&mut self, chars: &[char], start: usize) -> usize {
        let mut depth = 0;
        let mut i = start + 1;
        while i < chars.len() {
            match chars[i] {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        let end = i.min(chars.len());
        self.substitutions
            .push(chars[start + 2..end].iter().collect());
        self.push_str(&chars[start..(end + 1).min(chars.len())]);
        end
    }

    fn push(&mut self, c: char) {
        self.word.get_or_insert_with(String::new).push(c);
    }

    fn push_str(&mut self, chars: &[char]) {
        self.word.get_or_insert_with(String::new).extend(chars);
    }

    fn finish_word(&mut self) {
        if let Some(word) = self.word.take() {
            if self.redirect {
                self.redirect = false;
            } else {
                self.words.push(word);
            }
        }
    }

    fn finish_command(&mut self) {
        self.finish_word();
        self.redirect = false;
        if !self.words.is_empty() {
            self.commands.push(std::mem::take(&mut self.words));
        }
    }
}

/// The index of the first char from `start` that matches, or the end.
fn find(chars: &[char], start: usize, matches: impl Fn(char) -> bool) -> usize {
    (start..chars.len())
        .find(|&i| matches(chars[i]))
        .unwrap_or(chars.len())
}

#[test]
fn words_of_pipes_lists_quotes_and_substitutions() {
    let words =
        |line: &str| -> Vec<String> { commands(line).iter().map(|c| c.join(" ")).collect() };
    assert_eq!(
        words(r#"eval "$(make kubeconfig)"   # comment"#),
        ["eval $(make kubeconfig)", "make kubeconfig"]
    );
    assert_eq!(
        words("a 'x y' \"p q\" | grep -c z && b >out 2>&1; c &"),
        ["a x y p q", "grep -c z", "b", "c"]
    );
    assert_eq!(
        words(r#"kubectl get x -o jsonpath='{.a}{"\n"}' > f"#),
        [r#"kubectl get x -o jsonpath={.a}{"\n"}"#]
    );
    assert_eq!(words("A=1 make x#y"), ["A=1 make x#y"]);
}
