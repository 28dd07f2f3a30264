"""Recrawl policy, pure: change rates estimated from visits, revisits spread over a budget
to keep copies fresh (Cho and Garcia-Molina), and the classic rules to compare against."""
