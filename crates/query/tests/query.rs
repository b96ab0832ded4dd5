//! The query engine on files made here: the answer does not depend on how
//! row groups are split between runs, unsupported SQL is refused by
//! name, and bounds and overflows are errors, never wrong answers.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use bytes::Bytes;
use quarry_query::{write, Format, Merger, Query, QueryError};

/// A Parquet file of `rows` rows in row groups of `group_rows`.
fn file(rows: usize, group_rows: usize) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
    ]));
    let keys: Vec<Option<String>> = (0..rows)
        .map(|i| (!i.is_multiple_of(11)).then(|| format!("key{}", i % 7)))
        .collect();
    let values: Vec<Option<i64>> = (0..rows)
        .map(|i| (!i.is_multiple_of(13)).then_some((i as i64 * 37) % 1000 - 500))
        .collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(keys)),
            Arc::new(Int64Array::from(values)),
        ],
    )
    .unwrap();
    let mut out = Vec::new();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    out
}

fn footer(file: &[u8]) -> &[u8] {
    let n = file.len();
    let len = u32::from_le_bytes(file[n - 8..n - 4].try_into().unwrap()) as usize;
    &file[n - 8 - len..]
}

/// The answer with the row groups evaluated in runs of `per_run`.
fn answer(sql: &str, file: &[u8], per_run: usize) -> Result<String, QueryError> {
    answer_cut(sql, file, per_run, usize::MAX)
}

/// [`answer`], with each column chunk's bytes handed over in pieces of
/// `piece_bytes`, as chunks cut without regard to pages would be.
fn answer_cut(
    sql: &str,
    file: &[u8],
    per_run: usize,
    piece_bytes: usize,
) -> Result<String, QueryError> {
    let query = Query::parse(sql)?;
    let plan = query.bind("b/f.parquet", footer(file), file.len() as u64)?;
    let mut merger = Merger::new(&plan, 1 << 30)?;
    let groups = plan.row_groups()?;
    for run in groups.chunks(per_run.max(1)) {
        let mut data = Vec::new();
        for &g in run {
            for r in plan.ranges(g)? {
                let mut at = r.start as usize;
                while at < r.end as usize {
                    let end = (r.end as usize).min(at.saturating_add(piece_bytes));
                    data.push((at as u64, Bytes::copy_from_slice(&file[at..end])));
                    at = end;
                }
            }
        }
        merger.add(&plan.evaluate(run, data, 1 << 30)?, "b/f.parquet")?;
    }
    let batch = merger.finish()?;
    Ok(String::from_utf8(write(&batch, Format::Csv)?).unwrap())
}

const QUERIES: &[&str] = &[
    "SELECT k, count(*), count(v), sum(v), min(v), max(v), avg(v) FROM 'b/f.parquet' GROUP BY k ORDER BY k NULLS FIRST",
    "SELECT count(DISTINCT k), count(DISTINCT v) FROM 'b/f.parquet' WHERE v > -100",
    "SELECT k, sum(v) AS s FROM 'b/f.parquet' GROUP BY k HAVING sum(v) > 0 ORDER BY s DESC, k",
    "SELECT v, k FROM 'b/f.parquet' WHERE k LIKE 'key_' AND v IS NOT NULL ORDER BY v DESC, k LIMIT 7 OFFSET 3",
    "SELECT count(*) FROM 'b/f.parquet' WHERE k IS NULL OR v IN (1, 2, -3)",
];

#[test]
fn answers_do_not_depend_on_how_row_groups_are_split_into_runs() {
    let f = file(20_000, 1_500);
    for sql in QUERIES {
        let whole = answer(sql, &f, usize::MAX).unwrap();
        assert!(whole.lines().count() > 1, "{sql}: {whole}");
        for per_run in [1, 2, 5] {
            assert_eq!(
                answer(sql, &f, per_run).unwrap(),
                whole,
                "{sql}, {per_run} per run"
            );
        }
    }
}

#[test]
fn answers_do_not_depend_on_how_the_bytes_are_cut_into_chunks() {
    // Pieces smaller than a page header, and larger than a page: page
    // headers and page data cross from one piece into the next.
    let f = wide_file();
    let sql = "SELECT k, count(*) AS n, sum(v) AS sv, sum(d) AS sd, min(kk) AS m \
               FROM 'b/f.parquet' WHERE v > -450 GROUP BY k ORDER BY k NULLS FIRST";
    let whole = answer(sql, &f, 2).unwrap();
    for piece_bytes in [7, 1000, 65_536] {
        assert_eq!(
            answer_cut(sql, &f, 2, piece_bytes).unwrap(),
            whole,
            "{piece_bytes}"
        );
    }
    // A piece missing is an error naming the object, not a wrong answer.
    let query = Query::parse(sql).unwrap();
    let plan = query
        .bind("b/f.parquet", footer(&f), f.len() as u64)
        .unwrap();
    let r = plan.ranges(0).unwrap()[0].clone();
    let half = (r.start + r.end) / 2;
    let data = vec![
        (
            r.start,
            Bytes::copy_from_slice(&f[r.start as usize..half as usize]),
        ),
        (
            half + 1,
            Bytes::copy_from_slice(&f[half as usize + 1..r.end as usize]),
        ),
    ];
    let e = plan.evaluate(&[0], data, 1 << 30).unwrap_err().to_string();
    assert!(e.contains("b/f.parquet"), "{e}");
}

#[test]
fn aggregates_over_no_rows_give_one_row_of_zero_and_nulls() {
    let f = file(3_000, 1_000);
    let got = answer(
        "SELECT count(*), sum(v), min(k) FROM 'b/f.parquet' WHERE v > 10000",
        &f,
        1,
    )
    .unwrap();
    assert_eq!(got, "count(*),sum(v),min(k)\n0,,\n");
}

#[test]
fn statistics_rule_out_row_groups_and_the_answer_stays_the_same() {
    let f = file(20_000, 1_000);
    // v is (i * 37) % 1000 - 500, NULL where i % 13 == 0: a row group
    // whose largest v is 498 is ruled out for v > 498, and the count
    // must still be every row's.
    let sql = "SELECT count(*) FROM 'b/f.parquet' WHERE v > 498";
    let plan = Query::parse(sql)
        .unwrap()
        .bind("b/f.parquet", footer(&f), f.len() as u64)
        .unwrap();
    assert!(plan.row_groups().unwrap().len() < plan.row_groups_total());
    let want = (0..20_000i64)
        .filter(|i| i % 13 != 0 && (i * 37) % 1000 - 500 > 498)
        .count();
    assert_eq!(answer(sql, &f, 1).unwrap(), format!("count(*)\n{want}\n"));
    let none = Query::parse("SELECT count(*) FROM 'b/f.parquet' WHERE v > 500")
        .unwrap()
        .bind("b/f.parquet", footer(&f), f.len() as u64)
        .unwrap();
    assert!(none.row_groups().unwrap().is_empty());
    assert_eq!(
        answer("SELECT count(*) FROM 'b/f.parquet' WHERE v > 500", &f, 1).unwrap(),
        "count(*)\n0\n"
    );
}

#[test]
fn sql_outside_the_subset_is_refused_by_name() {
    for (sql, named) in [
        ("SELECT a FROM 'b/x' JOIN 'b/y' ON a = b", "JOIN"),
        ("SELECT a FROM (SELECT a FROM 'b/x')", "subquery"),
        ("SELECT upper(k) FROM 'b/f.parquet'", "upper"),
        (
            "SELECT CASE WHEN v > 0 THEN 1 END FROM 'b/f.parquet'",
            "CASE",
        ),
        ("SELECT DISTINCT k FROM 'b/f.parquet'", "DISTINCT"),
        ("SELECT sum(v) OVER () FROM 'b/f.parquet'", "window"),
        ("WITH t AS (SELECT 1) SELECT * FROM t", "WITH"),
    ] {
        let e = Query::parse(sql).unwrap_err().to_string();
        assert!(
            e.contains("not supported") && e.contains(named),
            "{sql}: {e}"
        );
    }
}

#[test]
fn wrong_queries_name_what_is_wrong() {
    let f = file(100, 100);
    let bind = |sql: &str| {
        Query::parse(sql)
            .and_then(|q| q.bind("b/f.parquet", footer(&f), f.len() as u64))
            .unwrap_err()
            .to_string()
    };
    assert!(bind("SELECT nope FROM 'b/f.parquet'").contains("nope"));
    assert!(bind("SELECT k, sum(v) FROM 'b/f.parquet'").contains("GROUP BY"));
    assert!(bind("SELECT k FROM 'b/f.parquet' WHERE v").contains("true or false"));
    let e = Query::parse("SELECT k FROM 'b/f.parquet' WHERE sum(v) > 1").unwrap_err();
    assert!(e.to_string().contains("WHERE"), "{e}");
    let e = Query::parse("SELECT k FROM 'b/f.parquet' ORDER BY 3").unwrap_err();
    assert!(e.to_string().contains("ORDER BY 3"), "{e}");
}

#[test]
fn a_damaged_footer_is_an_error_naming_the_object() {
    let f = file(1_000, 500);
    let q = Query::parse("SELECT count(*) FROM 'b/f.parquet'").unwrap();
    let mut bad = footer(&f).to_vec();
    let n = bad.len();
    bad[n / 2] ^= 0xff;
    bad[n / 3] ^= 0xff;
    match q.bind("b/f.parquet", &bad, f.len() as u64) {
        Err(e) => assert!(e.to_string().contains("b/f.parquet"), "{e}"),
        // A flip the decoder cannot see must still read or fail cleanly.
        Ok(plan) => {
            let _ = plan.row_groups();
        }
    }
    let e = q.bind("b/f.parquet", b"not parquet", 11).unwrap_err();
    assert!(
        e.to_string().contains("b/f.parquet") && e.to_string().contains("PAR1"),
        "{e}"
    );
}

#[test]
fn bounds_are_errors_not_wrong_answers() {
    let f = file(20_000, 5_000);
    let query = Query::parse("SELECT v, k FROM 'b/f.parquet'").unwrap();
    let plan = query
        .bind("b/f.parquet", footer(&f), f.len() as u64)
        .unwrap();
    let data: Vec<_> = plan
        .ranges(0)
        .unwrap()
        .into_iter()
        .map(|r| {
            (
                r.start,
                Bytes::copy_from_slice(&f[r.start as usize..r.end as usize]),
            )
        })
        .collect();
    let e = plan.evaluate(&[0], data, 1024).unwrap_err();
    assert!(matches!(e, QueryError::Limit(_)), "{e}");
    // A column chunk that was not fetched is an error naming the object.
    let e = plan.evaluate(&[1], Vec::new(), 1 << 30).unwrap_err();
    assert!(e.to_string().contains("b/f.parquet"), "{e}");
    // A sum beyond a BIGINT is an error.
    let big = {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![i64::MAX, i64::MAX]))],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, None).unwrap();
        w.write(&b).unwrap();
        w.close().unwrap();
        out
    };
    let e = answer("SELECT sum(v) FROM 'b/f.parquet'", &big, 1).unwrap_err();
    assert!(e.to_string().contains("BIGINT"), "{e}");
    assert_eq!(
        answer("SELECT max(v) FROM 'b/f.parquet'", &big, 1).unwrap(),
        format!("max(v)\n{}\n", i64::MAX)
    );
}

/// The columns of [`wide_file`]'s row `i`: a key with NULLs (some keys
/// only in rows `v > -450` drops), a value with NULLs, cents, text that
/// is a number except in the rows `s <> 'x'` drops, a key of 3001 values
/// (its dictionary overflows, so later pages are plain), and decimals too
/// large for 64 bits.
struct WideRow {
    k: Option<String>,
    v: Option<i64>,
    d: i128,
    s: String,
    kk: String,
    big: i128,
}

fn wide_row(i: usize) -> WideRow {
    let dropped_key = i % 97 == 5;
    WideRow {
        k: if dropped_key {
            Some("only-dropped".into())
        } else {
            (!i.is_multiple_of(11)).then(|| format!("key{}", i % 7))
        },
        v: if dropped_key {
            Some(-499)
        } else {
            (!i.is_multiple_of(13)).then_some((i as i64 * 37) % 1000 - 500)
        },
        d: (i as i128 * 7919) % 100_000 - 50_000,
        s: if i.is_multiple_of(17) {
            "x".into()
        } else {
            (i % 1000).to_string()
        },
        kk: format!("wide{}", i % 3001),
        big: i as i128 * 10i128.pow(20),
    }
}

const WIDE_ROWS: usize = 40_000;

fn wide_file() -> Vec<u8> {
    use arrow::array::Decimal128Array;
    let rows: Vec<WideRow> = (0..WIDE_ROWS).map(wide_row).collect();
    let decimal = |p, s| DataType::Decimal128(p, s);
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("d", decimal(12, 2), false),
        Field::new("s", DataType::Utf8, false),
        Field::new("kk", DataType::Utf8, false),
        Field::new("big", decimal(38, 0), false),
        Field::new("huge", decimal(38, 0), false),
    ]));
    let decimals = |f: &dyn Fn(&WideRow) -> i128, p, s| {
        Arc::new(
            Decimal128Array::from_iter_values(rows.iter().map(f))
                .with_precision_and_scale(p, s)
                .unwrap(),
        )
    };
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.k.clone()))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v))),
            decimals(&|r| r.d, 12, 2),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.s.clone()),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.kk.clone()),
            )),
            decimals(&|r| r.big, 38, 0),
            decimals(&|_| 9 * 10i128.pow(37), 38, 0),
        ],
    )
    .unwrap();
    let props = small_pages().set_dictionary_page_size_limit(4096).build();
    parquet_bytes(&batch, props)
}

/// Row groups of 7,000 rows and pages of 1,000, so a test's rows are cut
/// across both.
fn small_pages() -> parquet::file::properties::WriterPropertiesBuilder {
    parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(7_000))
        .set_data_page_row_count_limit(1000)
}

/// `batch` as a Parquet file written with `props`.
fn parquet_bytes(
    batch: &RecordBatch,
    props: parquet::file::properties::WriterProperties,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    out
}

/// A decimal of scale `scale` as arrow's CSV writes it.
fn decimal_text(v: i128, scale: u32) -> String {
    let unit = 10i128.pow(scale);
    let sign = if v < 0 { "-" } else { "" };
    let (whole, part) = (v.abs() / unit, v.abs() % unit);
    format!("{sign}{whole}.{part:0width$}", width = scale as usize)
}

/// Rows grouped by a key in the engine's order (NULL first), as CSV.
fn grouped_csv<K: Ord, V>(
    header: &str,
    groups: std::collections::BTreeMap<Option<K>, V>,
    line: impl Fn(&Option<K>, &V) -> String,
) -> String {
    let mut out = format!("{header}\n");
    for (k, v) in &groups {
        out += &line(k, v);
        out.push('\n');
    }
    out
}

#[test]
fn a_where_that_keeps_most_rows_folds_them_in_place_with_the_same_answer() {
    let f = wide_file();
    let rows: Vec<WideRow> = (0..WIDE_ROWS).map(wide_row).collect();

    // Most rows pass, so the groups fold them where they are and pass the
    // rest by: a key only the dropped rows have makes no group.
    let sql = "SELECT k, count(*) AS n, sum(v) AS sv, sum(d * (1 - d)) AS sd \
               FROM 'b/f.parquet' WHERE v > -450 GROUP BY k ORDER BY k NULLS FIRST";
    let mut expected = std::collections::BTreeMap::<Option<String>, (i64, i64, i128)>::new();
    for r in rows.iter().filter(|r| r.v.is_some_and(|v| v > -450)) {
        let e = expected.entry(r.k.clone()).or_default();
        e.0 += 1;
        e.1 += r.v.unwrap_or(0);
        e.2 += r.d * (100 - r.d);
    }
    assert!(!expected.contains_key(&Some("only-dropped".to_string())));
    let expected = grouped_csv("k,n,sv,sd", expected, |k, (n, sv, sd)| {
        format!(
            "{},{n},{sv},{}",
            k.as_deref().unwrap_or(""),
            decimal_text(*sd, 4)
        )
    });
    for per_run in [1, 3, usize::MAX] {
        assert_eq!(answer(sql, &f, per_run).unwrap(), expected, "{sql}");
    }

    // The cast fails in the rows the WHERE clause drops: those rows are
    // never cast.
    let sql = "SELECT k, sum(CAST(s AS BIGINT)) AS t FROM 'b/f.parquet' \
               WHERE s <> 'x' GROUP BY k ORDER BY k NULLS FIRST";
    let mut expected = std::collections::BTreeMap::<Option<String>, i64>::new();
    for r in rows.iter().filter(|r| r.s != "x") {
        *expected.entry(r.k.clone()).or_default() += r.s.parse::<i64>().unwrap();
    }
    let expected = grouped_csv("k,t", expected, |k, t| {
        format!("{},{t}", k.as_deref().unwrap_or(""))
    });
    assert_eq!(answer(sql, &f, 2).unwrap(), expected, "{sql}");
}

#[test]
fn string_keys_read_as_dictionaries_group_like_strings() {
    let f = wide_file();
    let rows: Vec<WideRow> = (0..WIDE_ROWS).map(wide_row).collect();
    // kk's dictionary overflows its page limit, so its later pages are
    // plain: batches of one key column come both ways.
    let sql = "SELECT kk, count(*) AS n, sum(v) AS sv FROM 'b/f.parquet' GROUP BY kk ORDER BY kk";
    let mut expected = std::collections::BTreeMap::<Option<String>, (i64, Option<i64>)>::new();
    for r in &rows {
        let e = expected.entry(Some(r.kk.clone())).or_default();
        e.0 += 1;
        if let Some(v) = r.v {
            e.1 = Some(e.1.unwrap_or(0) + v);
        }
    }
    let expected = grouped_csv("kk,n,sv", expected, |k, (n, sv)| {
        let sv = sv.map(|s| s.to_string()).unwrap_or_default();
        format!("{},{n},{sv}", k.as_deref().unwrap_or(""))
    });
    for per_run in [1, usize::MAX] {
        assert_eq!(answer(sql, &f, per_run).unwrap(), expected, "{sql}");
    }
    // Two keys, one read as a dictionary and one computed, with NULLs:
    // an integer (the keys' fast encoding, without the codes) and a
    // boolean (arrow's row format).
    let sql = "SELECT k, v + 1 AS m, count(*) AS n FROM 'b/f.parquet' \
               GROUP BY k, v + 1 ORDER BY k NULLS FIRST, m NULLS FIRST";
    let expected = counts_by_k_and("m", &rows, |r| r.v.map(|v| v + 1));
    assert_eq!(answer(sql, &f, 3).unwrap(), expected, "{sql}");
    let sql = "SELECT k, v > 0 AS p, count(*) AS n FROM 'b/f.parquet' \
               GROUP BY k, v > 0 ORDER BY k NULLS FIRST, p NULLS FIRST";
    let expected = counts_by_k_and("p", &rows, |r| r.v.map(|v| v > 0));
    assert_eq!(answer(sql, &f, 3).unwrap(), expected, "{sql}");
}

/// `SELECT k, <second> AS name, count(*) AS n ... GROUP BY k, <second>`
/// with both keys NULLS FIRST, counted by hand as CSV.
fn counts_by_k_and<T: Ord + ToString>(
    name: &str,
    rows: &[WideRow],
    second: impl Fn(&WideRow) -> Option<T>,
) -> String {
    let mut counts = std::collections::BTreeMap::<(Option<String>, Option<T>), i64>::new();
    for r in rows {
        *counts.entry((r.k.clone(), second(r))).or_default() += 1;
    }
    let mut out = format!("k,{name},n\n");
    for ((k, m), n) in counts {
        let m = m.map(|m| m.to_string()).unwrap_or_default();
        out += &format!("{},{m},{n}\n", k.unwrap_or_default());
    }
    out
}

#[test]
fn decimals_past_64_bits_stay_exact_and_overflows_are_errors() {
    let f = wide_file();
    let n = WIDE_ROWS as i128;
    // Values past 64 bits take arrow's checked path, and stay exact.
    let sum = 3 * 10i128.pow(20) * (n * (n - 1) / 2);
    assert_eq!(
        answer("SELECT sum(big * 3) AS t FROM 'b/f.parquet'", &f, 2).unwrap(),
        format!("t\n{sum}\n")
    );
    // A product past 128 bits, and a sum past 128 bits (grouped and not):
    // errors, never a wrapped value.
    for sql in [
        "SELECT sum(big * big) FROM 'b/f.parquet'",
        "SELECT sum(huge) FROM 'b/f.parquet'",
        "SELECT k, sum(huge) FROM 'b/f.parquet' GROUP BY k",
        "SELECT k, sum(huge) FROM 'b/f.parquet' WHERE v > -450 GROUP BY k",
    ] {
        let e = answer(sql, &f, 1).unwrap_err().to_string();
        assert!(e.contains("overflow"), "{sql}: {e}");
    }
}

/// A file of decimals `a`, `b` and `c` (with NULLs in `b`), stored as
/// 32- and 64-bit integers when `integers`, which the engine reads as
/// 64-bit decimals, or as fixed-length bytes (precision past 18), which
/// it reads as 128-bit ones. The values are the same either way.
fn decimal_file(integers: bool) -> Vec<u8> {
    use arrow::array::Decimal128Array;
    let rows = 30_000i128;
    let wide = if integers { 0 } else { 11 };
    let (pa, pb, pc) = (8 + wide, 16 + wide, 16 + wide);
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Decimal128(pa, 2), false),
        Field::new("b", DataType::Decimal128(pb, 2), true),
        Field::new("c", DataType::Decimal128(pc, 3), false),
    ]));
    let a = Decimal128Array::from_iter_values((0..rows).map(decimal_a));
    let b = Decimal128Array::from_iter((0..rows).map(decimal_b));
    let c =
        Decimal128Array::from_iter_values((0..rows).map(|i| (i * 7_919) % 2_000_000 - 1_000_000));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(a.with_precision_and_scale(pa, 2).unwrap()),
            Arc::new(b.with_precision_and_scale(pb, 2).unwrap()),
            Arc::new(c.with_precision_and_scale(pc, 3).unwrap()),
        ],
    )
    .unwrap();
    parquet_bytes(&batch, small_pages().build())
}

fn decimal_a(i: i128) -> i128 {
    (i * 37) % 100_000 - 20_000
}

fn decimal_b(i: i128) -> Option<i128> {
    (i % 9 != 4).then_some((i * 104_729) % 10_000_000_000_000 - 4_000_000_000_000)
}

#[test]
fn decimals_stored_as_integers_give_the_answers_of_decimals_stored_as_bytes() {
    let (narrow, wide) = (decimal_file(true), decimal_file(false));
    // The narrow file's decimals are integers in Parquet; the wide one's
    // are not (else this test compares a path with itself).
    let physical = |f: &[u8]| {
        let meta = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::copy_from_slice(f))
            .unwrap();
        let descr = meta.file_metadata().schema_descr_ptr();
        (0..3)
            .map(|i| descr.column(i).physical_type())
            .collect::<Vec<_>>()
    };
    use parquet::basic::Type as Physical;
    assert_eq!(
        physical(&narrow),
        [Physical::INT32, Physical::INT64, Physical::INT64]
    );
    assert!(physical(&wide)
        .iter()
        .all(|t| *t == Physical::FIXED_LEN_BYTE_ARRAY));
    let queries = [
        "SELECT sum(a * b), sum(a + b), sum(b - a), sum(a * 3), sum(b + 1), min(a), max(b), \
         avg(a), count(b) FROM 'b/f.parquet' WHERE a BETWEEN -15.5 AND 600.25 AND b < 1000000",
        "SELECT a, -b, b - a, a * c FROM 'b/f.parquet' WHERE c > a AND b IS NOT NULL \
         ORDER BY b DESC, a LIMIT 20",
        "SELECT count(*), sum(c) FROM 'b/f.parquet' WHERE a < 10.005 OR c >= a + b OR b = 17",
        "SELECT a, count(*), sum(b), min(c) FROM 'b/f.parquet' WHERE a > 499.5 \
         GROUP BY a ORDER BY a LIMIT 30",
        "SELECT count(*) FROM 'b/f.parquet' WHERE a IN (1.11, -200.00, 37.37) OR b = a",
        // A column with a computed array: 64 bits with 128 either way round.
        "SELECT sum(a * (b - 1)), sum(a * 3 + b), sum(b - a * 3), sum((c + 1) * a), \
         min(b - (a - 2)), sum(a * 3 - b) FROM 'b/f.parquet' WHERE a < 700",
    ];
    for sql in queries {
        let got = answer(sql, &narrow, 2).unwrap();
        assert_eq!(got, answer(sql, &wide, 3).unwrap(), "{sql}");
        assert!(got.lines().count() > 1, "{sql}: no rows");
    }
    // One answer worked out here, so both paths cannot agree on a wrong one.
    let (lo, hi) = (-1_550, 60_025);
    let expected: i128 = (0..30_000)
        .filter_map(|i| {
            let a = decimal_a(i);
            let b = decimal_b(i)?;
            (lo <= a && a <= hi && b < 100_000_000).then_some(a * b)
        })
        .sum();
    assert_eq!(
        answer(
            "SELECT sum(a * b) AS t FROM 'b/f.parquet' \
             WHERE a BETWEEN -15.5 AND 600.25 AND b < 1000000",
            &narrow,
            1
        )
        .unwrap(),
        format!("t\n{}\n", decimal_text(expected, 4))
    );
}
