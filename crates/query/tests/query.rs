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
        .map(|i| (i % 11 != 0).then(|| format!("key{}", i % 7)))
        .collect();
    let values: Vec<Option<i64>> = (0..rows)
        .map(|i| (i % 13 != 0).then_some((i as i64 * 37) % 1000 - 500))
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
    let query = Query::parse(sql)?;
    let plan = query.bind("b/f.parquet", footer(file), file.len() as u64)?;
    let mut merger = Merger::new(&plan, 1 << 30)?;
    let groups = plan.row_groups()?;
    for run in groups.chunks(per_run.max(1)) {
        let mut data = Vec::new();
        for &g in run {
            for r in plan.ranges(g)? {
                let bytes = Bytes::copy_from_slice(&file[r.start as usize..r.end as usize]);
                data.push((r.start, bytes));
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
