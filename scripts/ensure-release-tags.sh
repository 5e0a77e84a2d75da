#!/usr/bin/env bash
# Recreate the release tags listed in RELEASES that this clone lacks (a clean clone made without tags, as CI's is),
# as annotated tags on the commits named there, so the installed version (hatch-vcs: `git describe`) and the
# rolling-upgrade tests see the same releases everywhere. A tag that exists is left alone (tests/test_release.py
# checks it names the same commit); a commit missing from a shallow clone is said in one line and skipped.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || exit 0  # an unpacked sdist: no history, no tags to make
grep -v '^#' "$root/RELEASES" | while read -r tag commit when; do
    [ -n "$tag" ] || continue
    git -C "$root" rev-parse -q --verify "refs/tags/$tag" >/dev/null && continue
    if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "apportion: release $tag's commit $commit is not in this clone (shallow?): its tag is not recreated" >&2
        continue
    fi
    GIT_COMMITTER_NAME="apportion release" GIT_COMMITTER_EMAIL="releases@apportion.invalid" \
        GIT_COMMITTER_DATE="$when" \
        git -C "$root" tag -a "$tag" "$commit" -m "apportion ${tag#v} (recreated from RELEASES; CHANGELOG.md)"
    echo "apportion: recreated the release tag $tag from RELEASES" >&2
done
