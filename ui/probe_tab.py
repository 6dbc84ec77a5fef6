"""Placeholder: replaced by its owner."""
import streamlit as st


def render() -> None:
    st.info("Coming soon.")
